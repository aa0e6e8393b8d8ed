// tessera generate PLAN|MODEL --input-ids 1,2,3 --steps N [--carry OUT=IN]...
//                  [--backend cpu|reference] [--threads N]
// Greedy decoding of token ids (no tokenizer) over a decoder step's session:
// the prompt is fed one token a step (the prefill, which fills the cache),
// then each step feeds the argmax of the last logits (lowest id on ties,
// as numpy's argmax; over a vocab-parallel head, from the ranks' (max,
// index) pairs: Session::step_argmax). A mesh plan runs its ranks as threads here, or one
// rank per process under mpirun (every process decodes; rank 0 prints).
//
// The step it drives takes `input_ids` [1, 1] and a position (a
// `cache_position` [1] or `position_ids` [1, 1]) and its carried state
// (plan.json's carry and --carry); its logits are the output named
// `logits`, else the first output that is not carried.
//
// A decoder with a dynamic past (optimum's model.onnx: present.N.key one
// longer than past_key_values.N.key) planned at one past length P cannot
// carry its cache, which grows each step. generate runs such a plan as a
// window of P cache slots, left-padded as batched generation pads a
// prompt: before step t the last t slots hold the cache, attention_mask
// is 0 on the P - t empty slots and 1 on the rest and the new token, and
// present.N without its first slot is the next step's past_key_values.N.
// Masked slots get probability exactly 0, so the ids are those of a cache
// that grows. The tokens fed (the prompt, then the generated ones but the
// last) must number at most P + 1.
// The cache passes through this process each step (fed and returned as
// plain inputs and outputs): a plan whose cache stays on the ranks is a
// fixed-length cache written in place (cache_position, --carry).
//
// Faults under mpirun: a rank whose step fails says why and ends the job
// (Session: MPI_Abort); a rank that dies is noticed by mpirun, which ends
// the others with SIGTERM. Either way every other rank, blocked in a
// collective of the step, is ended within mpirun's own bound, and says so
// in one line (the handler below) naming its rank and the step it was on.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graph/error.h"
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

namespace tessera::cli {

namespace {

struct GenerateFlags {
  std::string model;
  std::string input_ids;
  int64_t steps = 16;
  bool stream = false;
  std::vector<std::string> carry;
  LoadFlags load;
  api::RunConfig config;
};

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      TESSERA_THROW(ErrorKind::kUsage, "--input-ids '" << text << "': expected token ids such as 1,2,3");
    }
  }
  if (ids.empty()) TESSERA_THROW(ErrorKind::kUsage, "--input-ids: give at least one token id");
  return ids;
}

// The rank and step a signal ends, for its one line; written before the
// handler is installed and read only by it.
std::atomic<int64_t> g_rank{0}, g_step{0};

// Async-signal-safe: write(2) of digits formatted by hand, then _exit.
void append_int(char* buf, size_t& n, size_t cap, int64_t v) {
  char digits[24];
  size_t d = 0;
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && d < sizeof digits);
  while (d > 0 && n < cap) buf[n++] = digits[--d];
}

void append(char* buf, size_t& n, size_t cap, const char* text) {
  for (; *text && n < cap; ++text) buf[n++] = *text;
}

extern "C" void ended_by_signal(int sig) {
  char buf[256];
  size_t n = 0, cap = sizeof buf - 1;
  append(buf, n, cap, "tessera: error: rank ");
  append_int(buf, n, cap, g_rank.load());
  append(buf, n, cap, ": ended by signal ");
  append_int(buf, n, cap, sig);
  append(buf, n, cap, " at step ");
  append_int(buf, n, cap, g_step.load());
  append(buf, n, cap, " of the generation (mpirun ends the job when one of its ranks fails or dies)\n");
  ssize_t ignored = ::write(STDERR_FILENO, buf, n);
  (void)ignored;
  ::_exit(1);
}

// What the step is fed: the token and its position, by the step's input
// names; for a dynamic past (the window), the mask and the past/present pairs.
struct StepInputs {
  std::string ids, position;
  Shape position_shape;
  std::string mask;
  std::vector<std::pair<std::string, std::string>> window;  // past input, present output
};

// The plan's input shapes: plan.json's input_shapes in a plan folder, else
// the model's.
std::map<std::string, Shape> input_shapes(const std::string& path, const LoadFlags& load) {
  std::map<std::string, Shape> shapes;
  std::filesystem::path json = std::filesystem::path(path) / "plan.json";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) && std::filesystem::exists(json, ec)) {
    std::ifstream in(json);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("input_shapes") && j["input_shapes"].is_object())
      for (const auto& [name, dims] : j["input_shapes"].items()) shapes[name] = dims.get<Shape>();
    return shapes;
  }
  Graph g = api::load(path, load_options(load));
  for (ValueId v : g.inputs()) shapes[g.value(v).name] = g.type(v).shape;
  return shapes;
}

StepInputs step_inputs(const api::Session& session) {
  StepInputs s;
  std::vector<std::string> outs = session.output_names();
  std::vector<std::string> carried;
  for (const api::CarryPair& c : session.carried()) carried.push_back(c.input);
  for (const std::string& name : session.input_names()) {
    if (std::find(carried.begin(), carried.end(), name) != carried.end()) continue;
    if (name == "input_ids") {
      s.ids = name;
    } else if (name == "cache_position") {
      s.position = name;
      s.position_shape = {1};
    } else if (name == "position_ids") {
      s.position = name;
      s.position_shape = {1, 1};
    } else if (name == "attention_mask") {
      s.mask = name;
    } else if (name.rfind("past_key_values.", 0) == 0 &&
               std::find(outs.begin(), outs.end(), "present." + name.substr(16)) != outs.end()) {
      s.window.emplace_back(name, "present." + name.substr(16));
    } else {
      TESSERA_THROW(ErrorKind::kUsage, "generate feeds input_ids and a position (cache_position or position_ids); "
                                       "input '" << name << "' is neither: if a step's output feeds it, say so with "
                                                            "--carry OUTPUT=" << name);
    }
  }
  if (s.ids.empty()) TESSERA_THROW(ErrorKind::kUsage, "generate needs a decoder step with an input named input_ids");
  if (!s.window.empty() && (s.mask.empty() || s.position != "position_ids"))
    TESSERA_THROW(ErrorKind::kUsage, "input '" << s.window[0].first << "' is not carried: a dynamic past needs "
                                                  "attention_mask and position_ids to run as a window (docs/cli.md#generate)");
  return s;
}

// The index of the largest value in the last row (the lowest on ties).
int64_t last_row_argmax(const Tensor& t) {
  if (t.shape().empty() || t.numel() == 0)
    TESSERA_THROW(ErrorKind::kUsage, "an output of type " << type_str(t.type()) << " has no last dim to pick from");
  int64_t n = t.shape().back(), base = t.numel() - n, best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (t.get_double(base + i) > t.get_double(base + best)) best = i;
  return best;
}

// The window of a dynamic past (the header): the caches, left-padded.
class Window {
 public:
  Window(const StepInputs& in, const std::map<std::string, Shape>& shapes, int64_t fed) : in_(in) {
    for (const auto& [past, present] : in.window) {
      auto it = shapes.find(past);
      if (it == shapes.end() || it->second.size() != 4)
        TESSERA_THROW(ErrorKind::kUsage, "input '" << past << "' is not a [batch, heads, past, head_dim] cache");
      if (slots_ >= 0 && it->second[2] != slots_)
        TESSERA_THROW(ErrorKind::kUsage, "input '" << past << "' has past length " << it->second[2] << ", '"
                                                   << in.window[0].first << "' " << slots_);
      slots_ = it->second[2];
      cache_[past] = Tensor(DType::kF32, it->second);
    }
    if (fed - 1 > slots_)
      TESSERA_THROW(ErrorKind::kUsage, "the plan's past length is " << slots_ << ": a window feeds at most " << slots_ + 1
                                       << " tokens, and the prompt and --steps feed " << fed
                                       << " (plan a longer past with --input-shape)");
  }

  // Step t's feeds besides the token: the mask, the position and the caches.
  void feed(int64_t t, std::map<std::string, Tensor>& feeds) const {
    std::vector<int64_t> mask(static_cast<size_t>(slots_ + 1), 0);
    for (int64_t i = slots_ - t; i <= slots_; ++i) mask[static_cast<size_t>(i)] = 1;
    feeds[in_.mask] = Tensor::from_ints(DType::kI64, {1, slots_ + 1}, mask);
    feeds[in_.position] = Tensor::from_ints(DType::kI64, {1, 1}, {t});
    for (const auto& [name, cache] : cache_) feeds[name] = cache;
  }

  // The next past: each present without its first (oldest) slot.
  void advance(const std::map<std::string, Tensor>& outs) {
    for (const auto& [past, present] : in_.window) {
      Tensor& cache = cache_[past];
      const Tensor& p = outs.at(present);
      Shape want = cache.shape();
      ++want[2];
      if (p.shape() != want || p.dtype() != cache.dtype())
        TESSERA_THROW(ErrorKind::kUsage, "output '" << present << "' is " << type_str(p.type()) << ": a window over '"
                                                    << past << "' needs " << type_str({cache.dtype(), want}));
      const Shape& s = cache.shape();
      int64_t rows = s[0] * s[1], row = s[2] * s[3], width = s[3];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < row; ++i) cache.set_double(r * row + i, p.get_double(r * (row + width) + width + i));
    }
  }

 private:
  const StepInputs& in_;
  int64_t slots_ = -1;
  std::map<std::string, Tensor> cache_;
};

int generate(const GenerateFlags& flags) {
  std::vector<int64_t> ids = parse_ids(flags.input_ids);
  if (flags.steps < 1) TESSERA_THROW(ErrorKind::kUsage, "--steps must be at least 1");
  api::SessionOptions options;
  options.run = flags.config;
  options.carry = flags.carry;
  api::Session session = api::Session::open(flags.model, options, load_options(flags.load));
  StepInputs in = step_inputs(session);
  std::unique_ptr<Window> window;
  if (!in.window.empty())
    window = std::make_unique<Window>(in, input_shapes(flags.model, flags.load),
                                      static_cast<int64_t>(ids.size()) + flags.steps - 1);
  std::vector<std::string> outs = session.output_names();
  if (outs.empty()) TESSERA_THROW(ErrorKind::kUsage, "every output of the step is carried: none gives the logits");
  std::string logits = std::find(outs.begin(), outs.end(), "logits") != outs.end() ? "logits" : outs[0];
  if (session.mpi()) {
    g_rank = session.rank();
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) std::signal(sig, ended_by_signal);
  }
  using Clock = std::chrono::steady_clock;
  bool stream = flags.stream && session.rank() == 0;
  auto step = [&](int64_t token, int64_t position) {
    g_step = position;
    std::map<std::string, Tensor> feeds;
    feeds[in.ids] = Tensor::from_ints(DType::kI64, {1, 1}, {token});
    if (window) {
      window->feed(position, feeds);
      std::map<std::string, Tensor> result = session.step(feeds);
      window->advance(result);
      return last_row_argmax(result.at(logits));
    }
    if (!in.position.empty()) feeds[in.position] = Tensor::from_ints(DType::kI64, in.position_shape, {position});
    // A vocab-parallel head: only the ranks' (max, index) pairs meet.
    return session.step_argmax(feeds, logits);
  };
  auto t0 = Clock::now();
  int64_t next = 0;
  for (size_t i = 0; i < ids.size(); ++i) next = step(ids[i], static_cast<int64_t>(i));
  auto t1 = Clock::now();
  std::vector<int64_t> generated{next};
  auto streamed = [&] {
    if (!stream) return;
    std::printf("token %zu: %lld\n", generated.size() - 1, static_cast<long long>(generated.back()));
    std::fflush(stdout);
  };
  streamed();
  while (static_cast<int64_t>(generated.size()) < flags.steps) {
    generated.push_back(step(generated.back(), static_cast<int64_t>(ids.size() + generated.size() - 1)));
    streamed();
  }
  auto t2 = Clock::now();
  if (session.rank() != 0) return 0;
  auto line = [](const char* what, const std::vector<int64_t>& v) {
    std::printf("%s", what);
    for (int64_t id : v) std::printf(" %lld", static_cast<long long>(id));
    std::printf("\n");
  };
  line("prompt:", ids);
  line("generated:", generated);
  double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  double decode_s = std::chrono::duration<double>(t2 - t1).count();
  int64_t decoded = flags.steps - 1;  // the first id came from the prefill
  std::printf("prefill: %zu tokens in %.3f ms; decode: %lld tokens in %.3f ms (%.1f tokens/s)\n", ids.size(),
              prefill_s * 1e3, static_cast<long long>(decoded), decode_s * 1e3,
              decoded > 0 && decode_s > 0 ? static_cast<double>(decoded) / decode_s : 0.0);
  std::printf("%lld rank%s%s, %d thread%s per rank; carried: %zu tensors\n", static_cast<long long>(session.ranks()),
              session.ranks() == 1 ? "" : "s",
              session.ranks() == 1 ? "" : (session.mpi() ? " (MPI processes)" : " (threads)"),
              session.threads_per_rank(), session.threads_per_rank() == 1 ? "" : "s", session.carried().size());
  if (flags.config.profile) std::printf("%s", session.profile_table().c_str());
  return 0;
}

}  // namespace

Action add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Greedy decoding of token ids over a decoder step's plan");
  cmd->footer(guide_footer("docs/cli.md#generate, docs/sharding.md#the-plans-boundary"));
  cmd->add_option("model", flags->model, "A decoder step: ONNX model file or plan folder (for a mesh: every rank, or "
                                          "this process's under mpirun)")
      ->required();
  cmd->add_option("--input-ids", flags->input_ids, "The prompt's token ids, comma-separated: 1,2,3")->required();
  cmd->add_option("--steps", flags->steps, "Token ids to generate (default 16)")->check(CLI::PositiveNumber);
  cmd->add_flag("--stream", flags->stream, "Print each id as it is generated ('token K: ID', flushed)");
  cmd->add_flag("--profile", flags->config.profile, "Print per-kernel times over all steps (rank 0's)");
  cmd->add_option("--carry", flags->carry,
                  "Carried state besides the plan's: OUTPUT=INPUT or glob pairs such as "
                  "'present.*=past_key_values.*' (repeatable)");
  add_load_flags(cmd, flags->load);
  cmd->add_option("--backend", flags->config.backend, "Backend: cpu (default) or reference")
      ->check(CLI::IsMember({"cpu", "cuda", "reference"}));
  cmd->add_option("--threads", flags->config.threads, "CPU threads (per rank for a mesh plan)")
      ->check(CLI::NonNegativeNumber);
  return [flags] { return generate(*flags); };
}

}  // namespace tessera::cli
