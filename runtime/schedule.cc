#include "runtime/schedule.h"

#include <algorithm>

namespace tessera::runtime {
namespace {

using Kind = PlanStep::Kind;

ValueId root_of(const PlanSpec& spec, ValueId v) {
  while (v != kNoValue && spec.values[v].kind == PlanValue::Kind::kAlias) v = spec.values[v].alias_of;
  return v;
}

// Builds the steps in one pass over the kernel order.
class Scheduler {
 public:
  explicit Scheduler(const PlanSpec& spec) : spec_(spec) {
    writer_.assign(spec.values.size(), -1);
    for (size_t k = 0; k < spec.kernels.size(); ++k)
      for (ValueId v : spec.kernels[k]->outputs)
        if (v != kNoValue) writer_[v] = static_cast<int32_t>(k);
  }

  std::vector<PlanStep> build() {
    const auto nk = static_cast<int32_t>(spec_.kernels.size());
    // after[c]: the kernel after which collective c starts (-1: first).
    std::vector<int32_t> after(static_cast<size_t>(nk), -1);
    std::vector<std::vector<int32_t>> starts_after(static_cast<size_t>(nk) + 1);
    int32_t previous = -1;
    for (int32_t k = 0; k < nk; ++k) {
      if (!spec_.kernels[k]->splits()) continue;
      int32_t a = previous;
      for (ValueId v : spec_.kernels[k]->inputs)
        if (ValueId r = root_of(spec_, v); r != kNoValue) a = std::max(a, writer_[r]);
      after[k] = previous = a;
      starts_after[static_cast<size_t>(a + 1)].push_back(k);
    }
    for (int32_t c : starts_after[0]) emit(Kind::kStart, c);
    for (int32_t k = 0; k < nk; ++k) {
      if (!spec_.kernels[k]->splits()) emit(Kind::kRun, k);
      for (int32_t c : starts_after[static_cast<size_t>(k) + 1]) emit(Kind::kStart, c);
    }
    for (int32_t c : started_) steps_.push_back({Kind::kFinish, c});
    return collapse();
  }

 private:
  // Appends a step, after the finishes of the started collectives it reads.
  void emit(Kind kind, int32_t k) {
    auto reads = [&](int32_t c) {
      for (ValueId v : spec_.kernels[k]->inputs)
        if (ValueId r = root_of(spec_, v); r != kNoValue && writer_[r] == c) return true;
      return false;
    };
    for (auto it = started_.begin(); it != started_.end();) {
      if (!reads(*it)) {
        ++it;
        continue;
      }
      steps_.push_back({Kind::kFinish, *it});
      it = started_.erase(it);
    }
    steps_.push_back({kind, k});
    if (kind == Kind::kStart) started_.push_back(k);
  }

  // A start whose finish follows with no kernel run in between becomes one
  // run step: the split would only add its costs.
  std::vector<PlanStep> collapse() const {
    std::vector<PlanStep> out;
    std::vector<bool> blocking(spec_.kernels.size(), false);
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (steps_[i].kind != Kind::kStart) continue;
      bool runs = false;
      size_t j = i + 1;
      for (; !(steps_[j].kind == Kind::kFinish && steps_[j].kernel == steps_[i].kernel); ++j)
        runs = runs || steps_[j].kind == Kind::kRun;
      if (!runs) blocking[steps_[i].kernel] = true;
    }
    for (const PlanStep& s : steps_) {
      if (!blocking[s.kernel]) out.push_back(s);
      else if (s.kind == Kind::kStart) out.push_back({Kind::kRun, s.kernel});
    }
    return out;
  }

  const PlanSpec& spec_;
  std::vector<int32_t> writer_;  // per value: the kernel that writes it, or -1
  std::vector<int32_t> started_;  // started, not finished, in start order
  std::vector<PlanStep> steps_;
};

}  // namespace

std::vector<PlanStep> schedule_steps(const PlanSpec& spec, bool overlap) {
  std::vector<PlanStep> steps;
  bool any = false;
  for (const auto& k : spec.kernels) any = any || k->splits();
  if (overlap && any) return Scheduler(spec).build();
  for (size_t k = 0; k < spec.kernels.size(); ++k) steps.push_back({Kind::kRun, static_cast<int32_t>(k)});
  return steps;
}

std::string describe_collective_steps(const PlanSpec& spec, const std::vector<PlanStep>& steps) {
  std::vector<int32_t> number(spec.kernels.size(), -1);
  int32_t next = 0;
  for (size_t k = 0; k < spec.kernels.size(); ++k)
    if (spec.kernels[k]->splits()) number[k] = next++;
  std::string out;
  for (const PlanStep& s : steps) {
    const Kernel& k = *spec.kernels[s.kernel];
    if (!k.splits()) continue;
    out += s.kind == Kind::kStart ? "start " : s.kind == Kind::kFinish ? "finish " : "run ";
    out += std::to_string(number[s.kernel]) + " " + k.op + " '" + k.node + "'\n";
  }
  return out;
}

}  // namespace tessera::runtime
