// tessera verify ORIGINAL.onnx CANDIDATE.onnx [--json] [--seed N] [--input-shape NAME=DIMS]...
// tessera verify --prove-rules [--json]
// Exit codes: 0 equivalent (or every obligation proven), 1 not equivalent
// (the differing output boxes are printed) or a proof not proven, 3 unknown
// (with the reason), 2 usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "graph/error.h"
#include "verifier/proofs.h"

namespace tessera::cli {

namespace {

struct VerifyFlags {
  std::string original, candidate;
  bool json = false;
  uint64_t seed = api::VerifyConfig{}.seed;
  LoadFlags load;
  bool prove_rules = false;
};

constexpr int kExitUnknown = 3;

nlohmann::json verdict_json(const api::Verdict& v) {
  nlohmann::json regions = nlohmann::json::array();
  for (const api::DifferingOutput& r : v.differing) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const api::Box& b : r.boxes) boxes.push_back({{"lo", b.lo}, {"hi", b.hi}});
    regions.push_back({{"output", r.output}, {"name", r.name}, {"boxes", boxes}});
  }
  return {{"verdict", v.kind},
          {"method", v.method},
          {"trials", v.trials},
          {"degree", v.degree},
          {"error_bound", v.error_bound},
          {"reason", v.reason},
          {"sampled_boxes", v.sampled_boxes},
          {"differing", regions}};
}

void print_text(const api::Verdict& v) {
  std::cout << v.summary << "\n";
  for (const api::DifferingOutput& r : v.differing) {
    std::cout << "output " << r.output << " (" << r.name << "):";
    for (const api::Box& b : r.boxes) std::cout << " " << b.str();
    std::cout << "\n";
  }
}

// Proves every named obligation (rules, sharding strategies, correction
// boundaries) afresh and prints one line each; exit 0 only if all are proven.
int prove_rules(bool json) {
  nlohmann::json out = nlohmann::json::array();
  int not_proven = 0;
  for (const verifier::ProofResult& r : verifier::prove_all(nullptr)) {
    not_proven += r.status != verifier::ProofStatus::kProven;
    if (json) {
      out.push_back({{"name", r.name}, {"version", r.version}, {"status", verifier::proof_status_name(r.status)},
                     {"seconds", r.seconds}, {"detail", r.detail}});
    } else {
      std::printf("%-48s %-8s %7.2f s  %s\n", r.name.c_str(), verifier::proof_status_name(r.status), r.seconds,
                  r.detail.c_str());
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  else std::printf("%zu obligations, %d not proven\n", verifier::proof_obligations().size(), not_proven);
  return not_proven ? 1 : 0;
}

}  // namespace

Action add_verify_command(CLI::App& app) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check that a candidate model computes the original's outputs (exit 0 yes, 1 no, 3 unknown)");
  cmd->footer(guide_footer("docs/cli.md#verify, docs/checks.md#tessera-verify (how it decides)"));
  cmd->add_option("original", flags->original, "Original ONNX model");
  cmd->add_option("candidate", flags->candidate, "Candidate ONNX model");
  cmd->add_flag("--prove-rules", flags->prove_rules,
                "Prove every rewrite rule, sharding strategy and correction boundary with Z3");
  cmd->add_flag("--json", flags->json, "Print JSON instead of text");
  cmd->add_option("--seed", flags->seed, "Seed of the random trials");
  add_load_flags(cmd, flags->load);
  return [flags] {
    if (flags->prove_rules) {
      if (!flags->original.empty()) TESSERA_THROW(ErrorKind::kUsage, "--prove-rules takes no model arguments");
      return prove_rules(flags->json);
    }
    if (flags->original.empty() || flags->candidate.empty())
      TESSERA_THROW(ErrorKind::kUsage, "verify needs ORIGINAL and CANDIDATE models (or --prove-rules)");
    api::LoadOptions options = load_options(flags->load);
    Graph original = api::load(flags->original, options);
    Graph candidate = api::load(flags->candidate, options);
    api::VerifyConfig check;
    check.seed = flags->seed;
    api::Verdict v = api::verify(original, candidate, check);
    if (flags->json) std::cout << verdict_json(v).dump(2) << "\n";
    else print_text(v);
    if (v.kind == "equivalent") return 0;
    if (v.kind == "differs") return 1;
    return kExitUnknown;
  };
}

}  // namespace tessera::cli
