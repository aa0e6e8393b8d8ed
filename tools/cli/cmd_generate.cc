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

// What the step is fed: the token and its position, by the step's input names.
struct StepInputs {
  std::string ids, position;
  Shape position_shape;
};

StepInputs step_inputs(const api::Session& session) {
  StepInputs s;
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
    } else {
      TESSERA_THROW(ErrorKind::kUsage, "generate feeds input_ids and a position (cache_position or position_ids); "
                                       "input '" << name << "' is neither: if a step's output feeds it, say so with "
                                                            "--carry OUTPUT=" << name);
    }
  }
  if (s.ids.empty()) TESSERA_THROW(ErrorKind::kUsage, "generate needs a decoder step with an input named input_ids");
  return s;
}

int generate(const GenerateFlags& flags) {
  std::vector<int64_t> ids = parse_ids(flags.input_ids);
  if (flags.steps < 1) TESSERA_THROW(ErrorKind::kUsage, "--steps must be at least 1");
  api::SessionOptions options;
  options.run = flags.config;
  options.carry = flags.carry;
  api::Session session = api::Session::open(flags.model, options, load_options(flags.load));
  StepInputs in = step_inputs(session);
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
