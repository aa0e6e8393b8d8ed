// ONNX backend node tests run through the importer and the reference
// interpreter (the harness and the expected-failure list are in
// tests/node_conformance.h, shared with the CPU runtime's run).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "graph/interpreter.h"
#include "onnx_import/onnx_import.h"
#include "onnx_import/tensor_proto.h"
#include "tests/node_conformance.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using node_conformance::compare;

TEST(NodeConformance, OnnxBackendNodeTests) {
  node_conformance::run_all_cases(
      [](const Graph& g, const std::vector<Tensor>& inputs, bool f64) {
        return evaluate(g, inputs, f64 ? Precision::kF64 : Precision::kF32);
      },
      "reference interpreter");
}

// The bundled examples (examples/generate.py) against the ONNX Runtime outputs
// saved beside them: real-model forms (BatchNorm, Shape->Gather->Concat
// reshapes, Trilu+Where causal mask, Erf-form Gelu) end to end.
class BundledExample : public ::testing::TestWithParam<std::string> {};

TEST_P(BundledExample, MatchesOnnxRuntime) {
  fs::path dir = fs::path(TESSERA_SOURCE_DIR) / "examples";
  fs::path data = dir / GetParam();
  Graph g = import_onnx_file((dir / (GetParam() + ".onnx")).string());
  std::vector<Tensor> inputs;
  for (int i = 0; fs::exists(data / ("input_" + std::to_string(i) + ".pb")); ++i) {
    inputs.push_back(read_tensor_file((data / ("input_" + std::to_string(i) + ".pb")).string()));
  }
  ASSERT_EQ(inputs.size(), g.inputs().size());
  std::vector<Tensor> outputs = evaluate(g, inputs, Precision::kF32);
  int checked = 0;
  for (; fs::exists(data / ("output_" + std::to_string(checked) + ".pb")); ++checked) {
    ASSERT_LT(static_cast<size_t>(checked), outputs.size());
    Tensor want = read_tensor_file((data / ("output_" + std::to_string(checked) + ".pb")).string());
    EXPECT_EQ(compare(outputs[checked], want), "") << "output " << checked;
  }
  EXPECT_EQ(static_cast<size_t>(checked), outputs.size());
}

INSTANTIATE_TEST_SUITE_P(Examples, BundledExample,
                         ::testing::Values("tiny_cnn", "tiny_transformer"));

}  // namespace
}  // namespace tessera
