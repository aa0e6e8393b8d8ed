// The `tessera` Python module: bindings over the embedding API
// (tools/api/tessera.h), nothing more. Tensors cross as numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>

#include "graph/error.h"
#include "tools/api/tessera.h"

namespace py = pybind11;

namespace tessera::python {

namespace {

// numpy dtype <-> DType. bf16 has no numpy type: it leaves as float32.
DType dtype_of(const py::dtype& dt) {
  std::string name = py::cast<std::string>(dt.attr("name"));
  static const std::map<std::string, DType> kByName = {
      {"float32", DType::kF32}, {"float64", DType::kF64}, {"float16", DType::kF16}, {"int64", DType::kI64},
      {"int32", DType::kI32},   {"int8", DType::kI8},     {"uint8", DType::kU8},    {"bool", DType::kBool}};
  auto it = kByName.find(name);
  if (it == kByName.end()) TESSERA_THROW(ErrorKind::kUsage, "numpy dtype '" << name << "' has no Tessera dtype");
  return it->second;
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kF32: case DType::kBF16: return py::dtype("float32");
    case DType::kF16: return py::dtype("float16");
    case DType::kF64: return py::dtype("float64");
    case DType::kI64: return py::dtype("int64");
    case DType::kI32: return py::dtype("int32");
    case DType::kI8: return py::dtype("int8");
    case DType::kU8: return py::dtype("uint8");
    case DType::kBool: return py::dtype("bool");
  }
  return py::dtype("float32");
}

// Data crosses through numpy's own Python API and the buffer protocol rather
// than pybind11's array internals, which read numpy's descriptor struct
// directly and disagree with the numpy 2 layout (itemsize read as 0).
Tensor to_tensor(const py::object& a) {
  py::module_ np = py::module_::import("numpy");
  py::object c = np.attr("ascontiguousarray")(a);
  DType dtype = dtype_of(c.attr("dtype").cast<py::dtype>());
  Shape shape = c.attr("shape").cast<std::vector<int64_t>>();
  py::buffer_info info = c.cast<py::buffer>().request();
  std::vector<uint8_t> bytes(static_cast<size_t>(c.attr("nbytes").cast<int64_t>()));
  if (!bytes.empty()) std::memcpy(bytes.data(), info.ptr, bytes.size());
  return Tensor::from_bytes(dtype, std::move(shape), std::move(bytes));
}

py::object to_numpy(const Tensor& t) {
  Tensor src = t.dtype() == DType::kBF16 ? t.cast(DType::kF32) : t;
  py::bytes raw(reinterpret_cast<const char*>(src.data()), static_cast<size_t>(src.nbytes()));
  py::module_ np = py::module_::import("numpy");
  return np.attr("frombuffer")(raw, numpy_dtype(src.dtype())).attr("reshape")(py::cast(src.shape())).attr("copy")();
}

// A loaded model: the graph and what the API says about it.
struct Model {
  Graph graph;

  py::dict summary() const {
    api::ModelSummary s = api::summarize(graph);
    auto values = [](const std::vector<api::ValueSummary>& vs) {
      py::list out;
      for (const auto& v : vs) out.append(py::dict(py::arg("name") = v.name, py::arg("dtype") = dtype_name(v.type.dtype),
                                                   py::arg("shape") = v.type.shape));
      return out;
    };
    return py::dict(py::arg("name") = s.name, py::arg("inputs") = values(s.inputs),
                    py::arg("outputs") = values(s.outputs), py::arg("ops") = s.ops_by_kind,
                    py::arg("nodes") = s.nodes, py::arg("parameters") = s.parameters,
                    py::arg("parameter_bytes") = s.parameter_bytes, py::arg("flops") = s.flops);
  }

  // Inputs as a list in graph order or a dict by name; missing ones are an error.
  std::vector<Tensor> bind(const py::object& inputs) const {
    std::vector<Tensor> out;
    if (py::isinstance<py::dict>(inputs)) {
      py::dict d = inputs.cast<py::dict>();
      for (ValueId v : graph.inputs()) {
        const std::string& name = graph.value(v).name;
        if (!d.contains(name)) TESSERA_THROW(ErrorKind::kUsage, "missing input '" << name << "'");
        out.push_back(to_tensor(d[name.c_str()]));
      }
    } else {
      for (const py::handle& a : inputs) out.push_back(to_tensor(py::reinterpret_borrow<py::object>(a)));
    }
    return out;
  }

  py::list run(const py::object& inputs, const std::string& backend, int threads) const {
    std::vector<Tensor> bound = bind(inputs);
    api::RunConfig config;
    config.backend = backend;
    config.threads = threads;
    api::RunResult r;
    {
      py::gil_scoped_release release;
      r = api::run(graph, bound, config);
    }
    py::list out;
    for (const Tensor& t : r.outputs) out.append(to_numpy(t));
    return out;
  }
};

Model load(const std::string& path, const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  api::LoadOptions options;
  for (const auto& [name, dims] : input_shapes) options.input_shapes[name] = dims;
  return Model{api::load(path, options)};
}

py::dict optimize(const Model& m, const std::string& out_dir, const std::string& device, double budget,
                  uint64_t seed, bool partial, const std::vector<std::string>& disabled_rules, bool measure) {
  api::OptimizeConfig config;
  config.device = device;
  config.budget_s = budget;
  config.seed = seed;
  config.partial = partial;
  config.disabled_rules = disabled_rules;
  config.measure = measure;
  api::OptimizeSummary s;
  {
    py::gil_scoped_release release;
    s = api::optimize(m.graph, out_dir, config);
  }
  return py::dict(py::arg("out_dir") = s.out_dir, py::arg("nodes_before") = s.nodes_before,
                  py::arg("nodes_after") = s.nodes_after, py::arg("mutations") = s.mutations,
                  py::arg("predicted_before_s") = s.predicted_before_s,
                  py::arg("predicted_after_s") = s.predicted_after_s,
                  py::arg("measured_before_ms") = s.measured_before_ms,
                  py::arg("measured_after_ms") = s.measured_after_ms, py::arg("search_seconds") = s.search_seconds,
                  py::arg("report") = s.report_text);
}

}  // namespace

PYBIND11_MODULE(tessera, m) {
  m.doc() = "Tessera: a superoptimizer for ONNX models (load, run, optimize, export).";
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      error(e.what());
    }
  });

  py::class_<Model>(m, "Model", "An imported model (statically shaped Tessera graph).")
      .def("summary", &Model::summary, "Inputs, outputs, ops by kind, parameters and FLOPs.")
      .def("run", &Model::run, py::arg("inputs"), py::arg("backend") = "cpu", py::arg("threads") = 0,
           "Runs the model on numpy inputs (a list in input order or a dict by name); returns the outputs.")
      .def("export", [](const Model& self, const std::string& path) { api::export_onnx(self.graph, path); },
           py::arg("path"), "Writes the model as ONNX (atomically).")
      .def("random_inputs",
           [](const Model& self, uint64_t seed) {
             py::list out;
             for (const Tensor& t : api::random_inputs(self.graph, seed)) out.append(to_numpy(t));
             return out;
           },
           py::arg("seed") = 0, "Seeded random inputs, as `tessera run` makes them.");

  m.def("load", &load, py::arg("path"), py::arg("input_shapes") = std::map<std::string, std::vector<int64_t>>{},
        "Imports an ONNX model file (or a folder written by optimize).");
  m.def("optimize", &optimize, py::arg("model"), py::arg("out_dir"), py::arg("device") = "cpu",
        py::arg("budget") = 30.0, py::arg("seed") = 0, py::arg("partial") = true,
        py::arg("disabled_rules") = std::vector<std::string>{}, py::arg("measure") = true,
        "Optimizes the model and writes out_dir/{model.onnx, plan.json, report.txt, report.json}.");
  m.def("list_rules", &api::list_rules, "The canonicalization passes and rewrite rules.");
}

}  // namespace tessera::python
