// tessera verify ORIGINAL.onnx CANDIDATE.onnx [--json] [--seed N] [--input-shape NAME=DIMS]...
// Exit codes: 0 equivalent, 1 not equivalent (the differing output boxes are
// printed), 3 unknown (with the reason), 2 usage.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "verifier/multilinear.h"

namespace tessera::cli {

namespace {

struct VerifyFlags {
  std::string original, candidate;
  bool json = false;
  uint64_t seed = verifier::CheckOptions{}.seed;
  std::vector<std::string> input_shapes;
};

constexpr int kExitUnknown = 3;

nlohmann::json verdict_json(const verifier::Verdict& v, const Graph& g) {
  nlohmann::json regions = nlohmann::json::array();
  for (const verifier::OutputRegion& r : v.differing) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const verifier::Box& b : r.boxes) boxes.push_back({{"lo", b.lo}, {"hi", b.hi}});
    regions.push_back({{"output", r.output}, {"name", g.value(g.outputs()[r.output]).name}, {"boxes", boxes}});
  }
  return {{"verdict", verifier::verdict_kind_name(v.kind)},
          {"method", verifier::method_name(v.method)},
          {"trials", v.trials},
          {"degree", v.degree},
          {"error_bound", v.error_bound},
          {"reason", v.reason},
          {"sampled_boxes", v.sampled_boxes},
          {"differing", regions}};
}

void print_text(const verifier::Verdict& v, const Graph& g) {
  std::cout << v.summary() << "\n";
  for (const verifier::OutputRegion& r : v.differing) {
    std::cout << "output " << r.output << " (" << g.value(g.outputs()[r.output]).name << "):";
    for (const verifier::Box& b : r.boxes) std::cout << " " << b.str();
    std::cout << "\n";
  }
}

}  // namespace

Action add_verify_command(CLI::App& app) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check that a candidate model computes the same outputs as the original (exit 0 equivalent, "
                "1 not equivalent, 3 unknown)");
  cmd->add_option("original", flags->original, "Original ONNX model")->required();
  cmd->add_option("candidate", flags->candidate, "Candidate ONNX model")->required();
  cmd->add_flag("--json", flags->json, "Print JSON instead of text");
  cmd->add_option("--seed", flags->seed, "Seed of the random trials");
  cmd->add_option("--input-shape", flags->input_shapes, "Fix an input's shape: NAME=1x3x224x224 (repeatable)");
  return [flags] {
    api::LoadOptions options = load_options(flags->input_shapes);
    Graph original = api::load(flags->original, options);
    Graph candidate = api::load(flags->candidate, options);
    verifier::CheckOptions check;
    check.seed = flags->seed;
    verifier::Verdict v = verifier::check_equivalence(original, candidate, check);
    if (flags->json) std::cout << verdict_json(v, original).dump(2) << "\n";
    else print_text(v, original);
    switch (v.kind) {
      case verifier::Verdict::kEquivalent: return 0;
      case verifier::Verdict::kDiffers: return 1;
      case verifier::Verdict::kUnknown: return kExitUnknown;
    }
    return kExitUnknown;
  };
}

}  // namespace tessera::cli
