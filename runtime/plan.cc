#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "runtime/communicator.h"
#include "runtime/cpu/skinny_matmul.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/memory_planner.h"
#include "runtime/plan_spec.h"
#include "runtime/runtime.h"
#include "runtime/schedule.h"
#include "runtime/thread_scope.h"

namespace tessera::runtime {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
    case Backend::kReference: return "reference";
  }
  return "?";
}

Backend backend_from_name(std::string_view name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  if (name == "reference") return Backend::kReference;
  TESSERA_THROW(ErrorKind::kUsage, "unknown backend '" << name << "' (expected cpu, cuda or reference)");
}

void bind_graph_values(const Graph& g, PlanSpec& spec) {
  spec.values.assign(static_cast<size_t>(g.num_values()), PlanValue{});
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    PlanValue& pv = spec.values[g.inputs()[i]];
    pv.kind = PlanValue::Kind::kInput;
    pv.input_index = static_cast<int64_t>(i);
    pv.bytes = g.type(g.inputs()[i]).nbytes();
    spec.input_types.push_back(g.type(g.inputs()[i]));
  }
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant) {
      PlanValue& pv = spec.values[v];
      pv.kind = PlanValue::Kind::kConstant;
      pv.constant = g.value(v).constant->data();
      pv.bytes = g.value(v).constant->nbytes();
    }
  for (ValueId v : g.outputs()) spec.output_types.push_back(g.type(v));
}

namespace {

// Shares the storage of every constant a kernel reads at run time or the plan
// returns as an output (prepacked ones are listed as kNoValue by their kernel).
void keep_constants(const Graph& g, PlanSpec& spec) {
  std::vector<bool> kept(spec.values.size(), false);
  auto keep = [&](ValueId v) {
    while (v != kNoValue && spec.values[v].kind == PlanValue::Kind::kAlias) v = spec.values[v].alias_of;
    if (v == kNoValue || v >= g.num_values() || kept[v] || spec.values[v].kind != PlanValue::Kind::kConstant) return;
    kept[v] = true;
    spec.constants.push_back(*g.value(v).constant);
    spec.values[v].constant = spec.constants.back().data();
  };
  for (const auto& k : spec.kernels)
    for (ValueId v : k->inputs) keep(v);
  for (ValueId v : spec.outputs) keep(v);
}

}  // namespace

std::string Profile::table() const {
  // The bandwidth is measured here, on the first table of a process that
  // shows a weight-streaming kernel, not in profile(): callers that read
  // the kernel times between runs do not pay for it (nor find the caches
  // flushed).
  cpu::DramBandwidth dram{dram_read_gbs, 0};
  if (dram.median_gbs == 0 && dram_threads > 0) dram = cpu::dram_read_bandwidth(dram_threads);
  double total = 0;
  for (const KernelProfile& k : kernels) total += k.total_ms;
  std::ostringstream os;
  os << std::fixed << std::setprecision(3);
  os << "     ms/run   median  share  op                         impl                       node\n";
  for (const KernelProfile& k : kernels) {
    double per_run = runs > 0 ? k.total_ms / static_cast<double>(runs) : 0.0;
    os << std::setw(11) << per_run << std::setw(9) << k.median_ms << "  " << std::setw(4) << std::setprecision(1)
       << (total > 0 ? 100.0 * k.total_ms / total : 0.0) << "%  " << std::setprecision(3) << std::left
       << std::setw(26) << k.op << " " << std::setw(26) << (k.fallback ? k.impl + " [FALLBACK]" : k.impl) << " "
       << k.node << std::right;
    if (k.streamed_bytes > 0 && k.median_ms > 0 && dram.median_gbs > 0) {
      double gbs = static_cast<double>(k.streamed_bytes) / (k.median_ms * 1e6);
      os << "  [" << std::setprecision(1) << gbs << " GB/s, " << std::setprecision(2) << gbs / dram.median_gbs
         << " of DRAM]" << std::setprecision(3);
    }
    os << "\n";
  }
  os << "total " << (runs > 0 ? total / static_cast<double>(runs) : 0.0) << " ms/run over " << runs << " runs\n";
  int64_t streamed = 0, streaming = 0;
  double streaming_ms = 0, streaming_median_ms = 0;
  for (const KernelProfile& k : kernels)
    if (k.streamed_bytes > 0) {
      streamed += k.streamed_bytes;
      streaming_ms += k.total_ms;
      streaming_median_ms += k.median_ms;
      ++streaming;
    }
  if (streaming > 0 && streaming_median_ms > 0 && dram.median_gbs > 0 && runs > 0) {
    double mean = streaming_ms / static_cast<double>(runs);
    auto gbs = [&](double ms) { return static_cast<double>(streamed) / (ms * 1e6); };
    os << std::setprecision(1) << "DRAM read bandwidth " << dram.median_gbs << " GB/s (" << dram_threads
       << (dram_threads == 1 ? " thread" : " threads");
    if (dram.best_gbs > 0)
      os << ", median of " << cpu::kDramPasses << " passes in this process, best " << dram.best_gbs;
    os << "); " << streaming << " weight-streaming kernels read " << static_cast<double>(streamed) / 1e6
       << " MB in " << std::setprecision(3) << streaming_median_ms << " ms/run (medians): " << std::setprecision(1)
       << gbs(streaming_median_ms) << " GB/s, " << std::setprecision(2) << gbs(streaming_median_ms) / dram.median_gbs
       << " of DRAM (means: " << std::setprecision(3) << mean << " ms/run, " << std::setprecision(2)
       << gbs(mean) / dram.median_gbs << ")\n";
  }
  return os.str();
}

class ExecutablePlan::Impl {
 public:
  Impl(PlanSpec spec, const RunOptions& options) : spec_(std::move(spec)), options_(options) { layout(); }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) { return run(inputs, nullptr); }
  std::vector<Tensor> run(std::vector<Tensor>& inputs, const std::vector<bool>& donated) {
    return run(inputs, &donated);
  }
  const std::vector<int64_t>& in_place_inputs() const { return in_place_input_; }
  MemoryReport memory() const { return memory_; }
  Profile profile() const;
  const RunOptions& options() const { return options_; }
  int64_t num_kernels() const { return static_cast<int64_t>(spec_.kernels.size()); }
  std::string collective_steps() const { return describe_collective_steps(spec_, steps_); }

 private:
  void layout();
  void find_in_place_inputs(const std::vector<int32_t>& last, const std::vector<int32_t>& run_step_of,
                            const std::vector<ValueId>& storage);
  // `donated` null: nothing donated; else inputs is the caller's non-const vector.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<bool>* donated);
  ValueId root(ValueId v) const {
    while (spec_.values[v].kind == PlanValue::Kind::kAlias) v = spec_.values[v].alias_of;
    return v;
  }
  // Whether `kern` reads the buffer of root value r through an operand
  // other than position `pos`.
  bool reads_twice(const Kernel& kern, int pos, ValueId r) const {
    for (size_t p = 0; p < kern.inputs.size(); ++p)
      if (static_cast<int>(p) != pos && kern.inputs[p] != kNoValue && root(kern.inputs[p]) == r) return true;
    return false;
  }

  void run_step(const PlanStep& step, ExecContext& ctx, int plan_threads, int& current_threads);
  // Runs work for `kernel`: errors name its node, --profile adds its time.
  template <class F>
  void timed(int32_t kernel, F&& work);

  PlanSpec spec_;
  RunOptions options_;
  std::vector<PlanStep> steps_;  // schedule_steps: the kernels, collectives split where they overlap
  MemoryReport memory_;
  std::vector<uint8_t*> base_ptr_;     // constants and arena values; the rest per run
  std::vector<int64_t> output_slot_;   // per value: the graph output whose tensor is its storage, or -1
  std::vector<std::pair<ValueId, ValueId>> aliases_;  // (alias, root), resolved per run
  std::vector<int64_t> scratch_offset_;  // per kernel, -1 for none
  // Per output: the input it can be computed in (in_place_inputs()), or -1;
  // and the root value written there (the in-place kernel's output).
  std::vector<int64_t> in_place_input_;
  std::vector<ValueId> in_place_root_;
  std::vector<ValueId> in_place_donor_;  // the input's value
  std::unique_ptr<uint8_t[]> arena_raw_;
  uint8_t* arena_ = nullptr;
  std::vector<double> kernel_ms_;
  LoadWatch load_;  // whether a run drops to one thread (OneThreadRuns::kWhenOversubscribed)
  // With options_.profile: each kernel's time in each run (kernel, run),
  // for the medians; kernel_ms_ at the last run's start.
  std::vector<std::vector<float>> run_ms_;
  std::vector<double> ms_before_run_;
  int64_t runs_ = 0;
  std::vector<Tensor> last_outputs_;  // shared with the caller; reused once it lets go
};

void ExecutablePlan::Impl::layout() {
  using Kind = PlanValue::Kind;
  const size_t nv = spec_.values.size();
  const int32_t nk = static_cast<int32_t>(spec_.kernels.size());
  output_slot_.assign(nv, -1);
  std::vector<bool> is_output(nv, false);
  for (ValueId v : spec_.outputs) is_output[v] = true;
  for (size_t j = 0; j < spec_.outputs.size(); ++j) {
    ValueId v = spec_.outputs[j];
    if (spec_.values[v].kind == Kind::kIntermediate && output_slot_[v] < 0) output_slot_[v] = static_cast<int64_t>(j);
  }

  // Liveness of each root buffer over the steps: written at its producer's
  // step (a split kernel's start), read until the last step that reads it
  // or any alias of it (a split kernel's finish: its inputs stay until the
  // exchange is done, and its outputs, written until then, too).
  steps_ = schedule_steps(spec_, options_.overlap && options_.communicator != nullptr);
  const auto ns = static_cast<int32_t>(steps_.size());
  std::vector<int32_t> first(nv, -1), last(nv, -1);
  std::vector<int32_t> run_step_of(static_cast<size_t>(nk), -1);
  std::vector<std::pair<int32_t, int32_t>> scratch_steps(static_cast<size_t>(nk), {-1, -1});
  for (int32_t i = 0; i < ns; ++i) {
    const PlanStep& step = steps_[i];
    const Kernel& kern = *spec_.kernels[step.kernel];
    if (step.kind == PlanStep::Kind::kRun) run_step_of[step.kernel] = i;
    if (step.kind != PlanStep::Kind::kFinish) {
      scratch_steps[step.kernel].first = i;
      for (ValueId v : kern.outputs)
        if (v != kNoValue && first[v] < 0) first[v] = i;
    }
    scratch_steps[step.kernel].second = i;
    for (ValueId v : kern.inputs)
      if (v != kNoValue) last[root(v)] = std::max(last[root(v)], i);
    if (step.kind == PlanStep::Kind::kFinish)
      for (ValueId v : kern.outputs)
        if (v != kNoValue) last[v] = std::max(last[v], i);
  }
  for (size_t v = 0; v < nv; ++v) {
    if (spec_.values[v].kind == Kind::kAlias) {
      aliases_.emplace_back(static_cast<ValueId>(v), root(static_cast<ValueId>(v)));
      ++memory_.aliases;
    }
    if (spec_.values[v].kind == Kind::kIntermediate) {
      TESSERA_CHECK(first[v] >= 0, "value " << v << " has no producing kernel");
      last[v] = std::max(last[v], first[v]);
    }
  }

  // The arena (memory_planner.h layout_arena): intermediates that are not
  // graph outputs, each from its first step to its last; in-place, an output
  // takes over an input's buffer when that input dies at this step, is an
  // arena buffer of the same size, and nothing else shares it.
  std::vector<ArenaValue> values(nv);
  for (size_t v = 0; v < nv; ++v) {
    const PlanValue& pv = spec_.values[v];
    values[v] = {pv.bytes, first[v], last[v], pv.kind == Kind::kIntermediate && output_slot_[v] < 0};
    if (values[v].in_arena) memory_.intermediate_bytes += pv.bytes;
  }
  std::vector<InPlaceCandidate> in_place;
  for (int32_t k = 0; k < nk; ++k) {
    const Kernel& kern = *spec_.kernels[k];
    if (kern.in_place_input < 0 || kern.outputs.empty() || run_step_of[k] < 0) continue;
    ValueId in = kern.inputs[static_cast<size_t>(kern.in_place_input)];
    if (in == kNoValue) continue;
    // No alias of `in` may be read later (its root dying at this step
    // covers that), nor by this kernel through another operand (a scatter
    // whose updates are a view of its data would read what it has
    // overwritten).
    if (reads_twice(kern, kern.in_place_input, root(in))) continue;
    in_place.push_back({run_step_of[k], kern.outputs[0], root(in)});
  }
  std::vector<BufferRequest> scratch;
  std::vector<int32_t> scratch_kernel;
  int64_t scratch_total = 0;
  for (int32_t k = 0; k < nk; ++k) {
    int64_t s = spec_.kernels[k]->scratch_bytes();
    if (s <= 0) continue;
    scratch.push_back({s, scratch_steps[k].first, scratch_steps[k].second});
    scratch_kernel.push_back(k);
    scratch_total += s;
  }
  ArenaLayout arena = layout_arena(values, in_place, scratch);
  memory_.in_place += arena.in_place;
  memory_.buffers = arena.buffers;
  memory_.arena_bytes = arena.arena_bytes;
  memory_.scratch_bytes = scratch_total;
  if (arena.arena_bytes > kMaxTensorBytes)
    TESSERA_THROW(ErrorKind::kResource, "plan needs an arena of " << arena.arena_bytes << " bytes");
  // Refused before it is allocated (the weights are already held).
  check_memory(arena.arena_bytes, "the runtime's activation arena");
  arena_raw_.reset(new uint8_t[static_cast<size_t>(arena.arena_bytes + kArenaAlignment)]);
  arena_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(arena_raw_.get()) + kArenaAlignment - 1) /
                                      kArenaAlignment * kArenaAlignment);

  base_ptr_.assign(nv, nullptr);
  scratch_offset_.assign(static_cast<size_t>(nk), -1);
  for (size_t i = 0; i < scratch_kernel.size(); ++i)
    scratch_offset_[static_cast<size_t>(scratch_kernel[i])] = arena.scratch_offset[i];
  for (size_t v = 0; v < nv; ++v) {
    if (arena.offset[v] >= 0) base_ptr_[v] = arena_ + arena.offset[v];
    if (spec_.values[v].kind == Kind::kConstant) base_ptr_[v] = const_cast<uint8_t*>(spec_.values[v].constant);
  }
  const std::vector<ValueId>& storage = arena.storage;
  find_in_place_inputs(last, run_step_of, storage);
  for (const auto& k : spec_.kernels) memory_.weight_bytes += k->weight_bytes();
  for (const Tensor& t : spec_.constants) memory_.weight_bytes += t.nbytes();
  for (const TensorType& t : spec_.input_types) memory_.io_bytes += t.nbytes();
  for (const TensorType& t : spec_.output_types) memory_.io_bytes += t.nbytes();
  memory_.peak_bytes = memory_.arena_bytes + memory_.weight_bytes + memory_.io_bytes;
  kernel_ms_.assign(static_cast<size_t>(nk), 0.0);
  if (options_.profile) run_ms_.assign(static_cast<size_t>(nk), {});
}

// Output j can be computed in input i's buffer when it is (a view of) the
// first output of a kernel that may write over its operand
// kern.inputs[in_place_input] (Kernel::in_place_input: a scatter writes its
// updates only, an element-wise kernel each element after reading it), that
// operand is (a view of) input i, of output j's type, and no step after the
// kernel reads input i or a view of it (a split collective's finish
// counts as a read): steps run one at a time in steps_' order, so readers at
// earlier steps have read the old values. Also refused: input i is itself
// (a view of) a graph output (copied out after the last step), the kernel
// reads input i through a second operand, the output's root is another
// output's storage or shares an arena buffer, or input i is claimed twice.
void ExecutablePlan::Impl::find_in_place_inputs(const std::vector<int32_t>& last,
                                                const std::vector<int32_t>& run_step_of,
                                                const std::vector<ValueId>& storage) {
  using Kind = PlanValue::Kind;
  const size_t nv = spec_.values.size();
  std::vector<int32_t> producer(nv, -1);
  for (size_t k = 0; k < spec_.kernels.size(); ++k)
    for (ValueId v : spec_.kernels[k]->outputs)
      if (v != kNoValue) producer[v] = static_cast<int32_t>(k);
  std::vector<bool> root_is_output(nv, false);
  for (ValueId v : spec_.outputs) root_is_output[root(v)] = true;
  std::vector<bool> claimed(spec_.input_types.size(), false);
  in_place_input_.assign(spec_.outputs.size(), -1);
  in_place_root_.assign(spec_.outputs.size(), kNoValue);
  in_place_donor_.assign(spec_.outputs.size(), kNoValue);
  for (size_t j = 0; j < spec_.outputs.size(); ++j) {
    ValueId r = root(spec_.outputs[j]);
    if (spec_.values[r].kind != Kind::kIntermediate || storage[r] != r || producer[r] < 0) continue;
    if (output_slot_[r] >= 0 && output_slot_[r] != static_cast<int64_t>(j)) continue;
    const auto k = static_cast<size_t>(producer[r]);
    const Kernel& kern = *spec_.kernels[k];
    if (kern.in_place_input < 0 || kern.outputs.empty() || kern.outputs[0] != r || run_step_of[k] < 0) continue;
    ValueId d = kern.inputs[static_cast<size_t>(kern.in_place_input)];
    if (d == kNoValue) continue;
    ValueId rd = root(d);
    if (spec_.values[rd].kind != Kind::kInput || root_is_output[rd] || last[rd] != run_step_of[k] ||
        reads_twice(kern, kern.in_place_input, rd))
      continue;
    const auto i = static_cast<size_t>(spec_.values[rd].input_index);
    if (claimed[i] || spec_.input_types[i] != spec_.output_types[j] || spec_.values[rd].bytes != spec_.values[r].bytes)
      continue;
    // No other value may share r's buffer while r lives (the in-place reuse
    // of intermediates gives r's storage only to values made after r dies).
    claimed[i] = true;
    in_place_input_[j] = static_cast<int64_t>(i);
    in_place_root_[j] = r;
    in_place_donor_[j] = rd;
    ++memory_.carried_in_place;
  }
}

std::vector<Tensor> ExecutablePlan::Impl::run(const std::vector<Tensor>& inputs, const std::vector<bool>* donated) {
  if (donated && donated->size() != inputs.size())
    TESSERA_THROW(ErrorKind::kUsage, "donated flags for " << donated->size() << " inputs, the plan takes "
                                                          << inputs.size());
  if (inputs.size() != spec_.input_types.size())
    TESSERA_THROW(ErrorKind::kUsage, "plan takes " << spec_.input_types.size() << " inputs, got " << inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].type() != spec_.input_types[i] || (!inputs[i].defined() && inputs[i].numel() > 0))
      TESSERA_THROW(ErrorKind::kUsage, "input " << i << " must be " << type_str(spec_.input_types[i]) << ", got "
                                                << type_str(inputs[i].type()));
  // oneDNN sizes a primitive's work split and scratch for the thread count
  // current at its creation and runs it with that count (a num_threads
  // clause): compile and run both under the plan's count (a plan compiled
  // under the default ran on every core at --threads 1: resnet18 15.9 s user
  // over 10.6 s wall).
  ExecContext ctx;
  // The caller's cores, read before the run binds it to one of them.
  const int cores = omp_get_num_procs();
  int plan_threads = options_.threads > 0 ? options_.threads : cores;
  // On oversubscribed cores the run drops to one thread, as ONNX Runtime's
  // pool degrades to its calling thread when the workers are not scheduled.
  using OneThread = RunOptions::OneThreadRuns;
  const bool watch = plan_threads > 1 && options_.one_thread_runs == OneThread::kWhenOversubscribed;
  if (plan_threads > 1 && (options_.one_thread_runs == OneThread::kAlways ||
                           (watch && load_.oversubscribed_at_start(cores)))) {
    ctx.one_thread = true;
    plan_threads = 1;
  }
  ThreadScope threads(plan_threads);
  // Not for ranks: ranks whose masks overlap (mpirun --bind-to none, or the
  // in-process ranks' threads) could bind two teams to the same CPUs.
  PinnedTeam pinned(options_.pin_threads && !options_.communicator ? plan_threads : 1);
  int current_threads = plan_threads;

  if (options_.profile) ms_before_run_ = kernel_ms_;
  ctx.ptr = base_ptr_;
  ctx.communicator = options_.communicator;
  for (size_t v = 0; v < spec_.values.size(); ++v)
    if (spec_.values[v].kind == PlanValue::Kind::kInput)
      ctx.ptr[v] = const_cast<uint8_t*>(inputs[static_cast<size_t>(spec_.values[v].input_index)].data());
  // The outputs' storage: the last run's, where the caller no longer holds
  // it, else new. A new tensor costs a zero fill and, for a large one, the
  // pages' first-touch faults, on every run: gpt2's 25.7 MB of logits, and
  // a Split's two 0.8 MB outputs 98-139 us where the model priced their
  // bytes 17 us. Every kernel writes each element of its output, so what a
  // reused buffer held does not matter.
  // A donated input's buffer holds its in-place output: the caller's Tensor
  // itself (made its own first where its storage is shared).
  std::vector<Tensor> outs;
  outs.reserve(spec_.outputs.size());
  std::vector<bool> in_place(spec_.outputs.size(), false);
  for (size_t j = 0; j < spec_.output_types.size(); ++j) {
    const TensorType& t = spec_.output_types[j];
    int64_t i = in_place_input_[j];
    if (donated && i >= 0 && (*donated)[static_cast<size_t>(i)]) {
      auto& mine = const_cast<std::vector<Tensor>&>(inputs)[static_cast<size_t>(i)];  // non-const: see donated
      uint8_t* p = mine.mutable_data();
      ctx.ptr[in_place_donor_[j]] = p;
      ctx.ptr[in_place_root_[j]] = p;
      outs.push_back(mine);
      in_place[j] = true;
    } else if (j < last_outputs_.size() && last_outputs_[j].defined() && !last_outputs_[j].data_shared() &&
        last_outputs_[j].type() == t)
      outs.push_back(std::move(last_outputs_[j]));
    else
      outs.emplace_back(t.dtype, t.shape);
  }
  last_outputs_.clear();
  for (size_t j = 0; j < spec_.outputs.size(); ++j) {
    ValueId v = spec_.outputs[j];
    if (output_slot_[v] == static_cast<int64_t>(j) && !in_place[j]) ctx.ptr[v] = outs[j].mutable_data();
  }
  for (const auto& [alias, r] : aliases_) ctx.ptr[alias] = ctx.ptr[r];

  // Open MPI advances a started collective only inside MPI calls: the run
  // lets it progress after every kernel while one is in flight. Its time
  // counts as the oldest one's, so that a collective's time in the profile
  // is all the time its rank spends in the communicator for it. Measured on
  // 2 cores, 2 ranks x 1 thread under mpirun, a 1 MiB and a 2 MiB
  // AllReduce in flight with one matmul (bench_overlap.py's model at
  // 512x512 and 2048x256), medians of 9 and 15 rounds of --repeat 30, with
  // the test / without / --no-overlap, collective ms per run: 1.09 / 1.29 /
  // 0.94 and 0.68 / 1.01 / 0.87 (1 MiB); 1.41 / 1.24 / 1.62 and 1.47 / 1.55
  // / 1.55 (2 MiB); the latencies moved together by up to 50% from round to
  // round. On shared memory the exchange is copies and sums on the ranks'
  // own cores, done in MPI_Test or in MPI_Wait alike; a test costs a few
  // microseconds, and where a NIC moves the data it is what lets a
  // rendezvous proceed before the wait.
  std::vector<int32_t> in_flight;  // started, not finished, oldest first
  for (const PlanStep& step : steps_) {
    run_step(step, ctx, plan_threads, current_threads);
    if (step.kind == PlanStep::Kind::kStart) {
      in_flight.push_back(step.kernel);
    } else if (step.kind == PlanStep::Kind::kFinish) {
      in_flight.erase(std::find(in_flight.begin(), in_flight.end(), step.kernel));
    } else if (!in_flight.empty()) {
      timed(in_flight.front(), [&] { ctx.communicator->progress(); });
    }
  }
  for (size_t j = 0; j < spec_.outputs.size(); ++j) {
    ValueId v = spec_.outputs[j];
    if (output_slot_[v] == static_cast<int64_t>(j) || in_place[j] || outs[j].nbytes() == 0) continue;
    std::memcpy(outs[j].mutable_data(), ctx.ptr[v], static_cast<size_t>(outs[j].nbytes()));
  }
  if (watch) load_.sample_at_end(cores, plan_threads);
  ++runs_;
  if (options_.profile)
    for (size_t k = 0; k < run_ms_.size(); ++k)
      run_ms_[k].push_back(static_cast<float>(kernel_ms_[k] - ms_before_run_[k]));
  // A donated buffer is the caller's: the next run must not take it back.
  last_outputs_ = outs;
  for (size_t j = 0; j < outs.size(); ++j)
    if (in_place[j]) last_outputs_[j] = Tensor();
  return outs;
}

void ExecutablePlan::Impl::run_step(const PlanStep& step, ExecContext& ctx, int plan_threads, int& current_threads) {
  const auto k = static_cast<size_t>(step.kernel);
  Kernel& kern = *spec_.kernels[k];
  ctx.scratch = scratch_offset_[k] >= 0 ? arena_ + scratch_offset_[k] : nullptr;
  int want = kern.max_threads > 0 ? std::min(kern.max_threads, plan_threads) : plan_threads;
  if (want != current_threads) omp_set_num_threads(current_threads = want);
  timed(step.kernel, [&] {
    switch (step.kind) {
      case PlanStep::Kind::kRun: kern.run(ctx); break;
      case PlanStep::Kind::kStart: kern.start(ctx); break;
      case PlanStep::Kind::kFinish: kern.finish(ctx); break;
    }
  });
}

template <class F>
void ExecutablePlan::Impl::timed(int32_t kernel, F&& work) {
  const Kernel& kern = *spec_.kernels[static_cast<size_t>(kernel)];
  auto t0 = std::chrono::steady_clock::now();
  try {
    work();
  } catch (const Error& e) {
    throw e.with_context({"", kern.node, kern.op});
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kInternal, e.what(), {"", kern.node, kern.op});
  }
  if (options_.profile)
    kernel_ms_[static_cast<size_t>(kernel)] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Profile ExecutablePlan::Impl::profile() const {
  Profile p;
  p.runs = options_.profile ? runs_ : 0;
  if (!options_.profile) return p;
  for (size_t k = 0; k < spec_.kernels.size(); ++k) {
    const Kernel& kern = *spec_.kernels[k];
    p.kernels.push_back(
        {kern.node, kern.op, kern.impl(), kern.fallback, kernel_ms_[k], runs_, kern.streamed_bytes, kern.wait_ms()});
    std::vector<float> ms = run_ms_[k];
    if (!ms.empty()) {
      auto mid = ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2);
      std::nth_element(ms.begin(), mid, ms.end());
      p.kernels.back().median_ms = *mid;
    }
    if (kern.streamed_bytes > 0) p.dram_threads = options_.threads > 0 ? options_.threads : omp_get_num_procs();
  }
  std::stable_sort(p.kernels.begin(), p.kernels.end(),
                   [](const KernelProfile& a, const KernelProfile& b) { return a.total_ms > b.total_ms; });
  return p;
}

namespace {

void compile_spec(const Graph& g, const RunOptions& options, const std::function<void(ValueId)>& release,
                  PlanSpec& spec) {
  if (options.threads < 0) TESSERA_THROW(ErrorKind::kUsage, "thread count must be >= 0, got " << options.threads);
  g.validate();
  // Before any kernel is built: a graph with collectives needs the ranks.
  check_collectives(g, options.communicator);
  ThreadScope threads(options.threads);
  switch (options.backend) {
    case Backend::kCpu:
    case Backend::kReference:
      compile_cpu(g, options, spec, release);
      break;
    case Backend::kCuda:
      compile_cuda(g, options, spec);
      break;
  }
  keep_constants(g, spec);
}

}  // namespace

ExecutablePlan ExecutablePlan::compile(const Graph& g, const RunOptions& options) {
  PlanSpec spec;
  compile_spec(g, options, {}, spec);
  return ExecutablePlan(std::make_unique<Impl>(std::move(spec), options));
}

ExecutablePlan ExecutablePlan::compile(Graph&& g, const RunOptions& options) {
  Graph owned = std::move(g);
  // The plan owns the graph now, so a constant whose kernels hold prepacked
  // copies can be freed before the next one is packed: peak memory holds the
  // weights once, not twice (the graph is non-const; only its Value accessor is).
  auto release = [&owned](ValueId v) { const_cast<Value&>(owned.value(v)).constant.reset(); };
  PlanSpec spec;
  compile_spec(owned, options, release, spec);
  return ExecutablePlan(std::make_unique<Impl>(std::move(spec), options));
}

ExecutablePlan::ExecutablePlan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExecutablePlan::ExecutablePlan(ExecutablePlan&&) noexcept = default;
ExecutablePlan& ExecutablePlan::operator=(ExecutablePlan&&) noexcept = default;
ExecutablePlan::~ExecutablePlan() = default;
std::vector<Tensor> ExecutablePlan::run(const std::vector<Tensor>& inputs) { return impl_->run(inputs); }
std::vector<Tensor> ExecutablePlan::run(std::vector<Tensor>& inputs, const std::vector<bool>& donated) {
  return impl_->run(inputs, donated);
}
const std::vector<int64_t>& ExecutablePlan::in_place_inputs() const { return impl_->in_place_inputs(); }
MemoryReport ExecutablePlan::memory() const { return impl_->memory(); }
Profile ExecutablePlan::profile() const { return impl_->profile(); }
const RunOptions& ExecutablePlan::options() const { return impl_->options(); }
int64_t ExecutablePlan::num_kernels() const { return impl_->num_kernels(); }
std::string ExecutablePlan::collective_steps() const { return impl_->collective_steps(); }

}  // namespace tessera::runtime
