// Optimizes a model in memory with Tessera's embedding API, runs the
// original and the optimized model on the same input and compares them.
//   embed_tessera MODEL.onnx [PLAN_DIR]
// Exit 0 when the plan changed the model and the outputs agree within
// tolerance (and, given PLAN_DIR, the plan was saved there); 1 otherwise,
// with the reason on stderr.
#include <tessera/tessera.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: embed_tessera MODEL.onnx [PLAN_DIR]\n");
    return 2;
  }
  try {
    namespace api = tessera::api;
    tessera::Graph model = api::load(argv[1]);
    api::OptimizeConfig config;
    config.budget_s = 10;
    config.measure = false;
    api::Plan plan = api::optimize(model, config);
    std::printf("%zu mutations; predicted %.4g ms -> %.4g ms\n", plan.mutations.size(),
                plan.summary.predicted_before_s * 1e3, plan.summary.predicted_after_s * 1e3);
    for (const api::Mutation& m : plan.mutations) std::printf("  %s %s (%s)\n", m.stage.c_str(), m.rule.c_str(), m.verification.c_str());
    if (plan.mutations.empty()) {
      std::fprintf(stderr, "embed_tessera: the plan changed nothing\n");
      return 1;
    }

    std::vector<tessera::Tensor> inputs = api::random_inputs(model, 1);
    std::vector<tessera::Tensor> want = api::run(model, inputs);
    std::vector<tessera::Tensor> got = api::run(plan, inputs).outputs;
    if (got.size() != want.size()) {
      std::fprintf(stderr, "embed_tessera: %zu outputs, the original has %zu\n", got.size(), want.size());
      return 1;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i].shape() != want[i].shape()) {
        std::fprintf(stderr, "embed_tessera: output %zu has another shape\n", i);
        return 1;
      }
      double max_err = 0, max_ref = 0;
      for (int64_t k = 0; k < want[i].numel(); ++k) {
        max_err = std::max(max_err, std::abs(got[i].get_double(k) - want[i].get_double(k)));
        max_ref = std::max(max_ref, std::abs(want[i].get_double(k)));
      }
      std::printf("output %zu: max |optimized - original| = %.3g (max |original| %.3g)\n", i, max_err, max_ref);
      if (!(max_err <= 1e-4 * std::max(max_ref, 1.0))) {
        std::fprintf(stderr, "embed_tessera: output %zu differs from the original's\n", i);
        return 1;
      }
    }
    if (argc == 3) {
      plan.save(argv[2]);
      std::printf("saved %s\n", argv[2]);
    }
    return 0;
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "embed_tessera: %s\n", e.what());
    return 1;
  }
}
