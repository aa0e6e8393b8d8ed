#include "tools/api/tessera.h"

#include <random>

#include "cost/flops.h"
#include "graph/interpreter.h"
#include "onnx_import/onnx_export.h"
#include "onnx_import/onnx_import.h"

namespace tessera::api {

Graph load(const std::string& path, const LoadOptions& options) {
  ImportOptions import;
  import.input_shapes = options.input_shapes;
  return import_onnx_file(path, import);
}

ModelSummary summarize(const Graph& g) {
  ModelSummary s;
  s.name = g.name;
  for (ValueId v : g.inputs()) s.inputs.push_back({g.value(v).name, g.type(v)});
  for (ValueId v : g.outputs()) s.outputs.push_back({g.value(v).name, g.type(v)});
  for (NodeId n = 0; n < g.num_nodes(); ++n) ++s.ops_by_kind[op_name(g.node(n).kind)];
  s.nodes = g.num_nodes();
  s.parameters = g.parameter_count();
  s.parameter_bytes = g.parameter_bytes();
  s.flops = graph_flops(g);
  return s;
}

std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> out;
  for (ValueId v : g.inputs()) {
    const TensorType& type = g.type(v);
    Tensor t(type.dtype, type.shape);
    if (is_float(type.dtype)) {
      std::uniform_real_distribution<double> dist(-1.0, 1.0);
      for (int64_t i = 0; i < t.numel(); ++i) t.set_double(i, dist(rng));
    } else {
      std::uniform_int_distribution<int64_t> dist(0, 1);
      for (int64_t i = 0; i < t.numel(); ++i) t.set_int(i, dist(rng));
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs) {
  bool f64 = false;
  for (ValueId v : g.inputs()) f64 |= g.type(v).dtype == DType::kF64;
  return evaluate(g, inputs, f64 ? Precision::kF64 : Precision::kF32);
}

void export_onnx(const Graph& g, const std::string& path) { save_onnx_file(g, path); }

}  // namespace tessera::api
