// ONNX backend node tests on the CPU runtime: the same cases, comparison and
// expected-failure list as the reference interpreter's run
// (tests/node_conformance.h), so the backend passes exactly what the
// interpreter passes.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/runtime.h"
#include "tests/node_conformance.h"

namespace tessera {
namespace {

std::vector<Tensor> run_on_cpu(const Graph& g, const std::vector<Tensor>& inputs, bool /*f64*/) {
  runtime::RunOptions options;
  options.backend = runtime::Backend::kCpu;
  options.threads = 1;  // one case per child process; the cases are tiny
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, options);
  return plan.run(inputs);
}

TEST(NodeConformanceCpu, OnnxBackendNodeTests) { node_conformance::run_all_cases(run_on_cpu, "CPU runtime"); }

}  // namespace
}  // namespace tessera
