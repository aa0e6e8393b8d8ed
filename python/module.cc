// tessera._tessera, the compiled half of the `tessera` Python package
// (python/tessera/__init__.py is the other): bindings over the embedding API
// (<tessera/tessera.h>), nothing more. Tensors cross as numpy arrays, models
// as Model (an imported graph) or serialized ONNX bytes. The GIL is released
// while the C++ side searches, runs or verifies.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include <tessera/tessera.h>

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

// Inputs as a list in graph order or a dict by name; missing ones are an error.
std::vector<Tensor> bind(const Graph& graph, const py::object& inputs) {
  std::vector<Tensor> out;
  if (py::isinstance<py::dict>(inputs)) {
    py::dict d = inputs.cast<py::dict>();
    for (ValueId v : graph.inputs()) {
      const std::string& name = graph.value(v).name;
      if (!d.contains(name)) TESSERA_THROW(ErrorKind::kUsage, "missing input '" << name << "'");
      out.push_back(to_tensor(d[name.c_str()]));
    }
    for (const auto& [key, value] : d) {
      std::string name = py::str(key);
      bool known = false;
      for (ValueId v : graph.inputs()) known = known || graph.value(v).name == name;
      if (!known) TESSERA_THROW(ErrorKind::kUsage, "the model has no input '" << name << "'");
    }
  } else {
    for (const py::handle& a : inputs) out.push_back(to_tensor(py::reinterpret_borrow<py::object>(a)));
  }
  return out;
}

api::RunConfig run_config(const std::string& backend, int threads) {
  api::RunConfig config;
  config.backend = backend;
  config.threads = threads;
  return config;
}

py::bytes bytes_of(const Graph& g) {
  std::string b;
  {
    py::gil_scoped_release release;
    b = api::onnx_bytes(g);
  }
  return py::bytes(b);
}

// Compiled plans of one graph by (backend, threads), made on first use, so
// that repeated runs do not compile again. Called with the GIL held, which
// guards the map; compiling and running release it.
class ExecutableCache {
 public:
  std::shared_ptr<api::Executable> get(const Graph& g, const std::string& backend, int threads) {
    auto key = std::make_pair(backend, threads);
    if (auto it = by_config_.find(key); it != by_config_.end()) return it->second;
    std::shared_ptr<api::Executable> e;
    {
      py::gil_scoped_release release;
      e = std::make_shared<api::Executable>(g, run_config(backend, threads));
    }
    return by_config_.emplace(key, e).first->second;
  }

 private:
  std::map<std::pair<std::string, int>, std::shared_ptr<api::Executable>> by_config_;
};

api::RunResult run_cached(ExecutableCache& cache, const Graph& g, const std::vector<Tensor>& inputs,
                          const std::string& backend, int threads) {
  std::shared_ptr<api::Executable> e = cache.get(g, backend, threads);
  py::gil_scoped_release release;
  return e->run(inputs);
}

// A loaded model: the graph and what the API says about it.
struct Model {
  Graph graph;
  ExecutableCache compiled;

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

  py::list run(const py::object& inputs, const std::string& backend, int threads) {
    std::vector<Tensor> bound = bind(graph, inputs);
    api::RunResult r = run_cached(compiled, graph, bound, backend, threads);
    py::list out;
    for (const Tensor& t : r.outputs) out.append(to_numpy(t));
    return out;
  }
};

using Shapes = std::map<std::string, std::vector<int64_t>>;

api::LoadOptions load_options(const Shapes& input_shapes) {
  api::LoadOptions options;
  for (const auto& [name, dims] : input_shapes) options.input_shapes[name] = dims;
  return options;
}

Model load(const std::string& path, const Shapes& input_shapes) {
  api::LoadOptions options = load_options(input_shapes);
  py::gil_scoped_release release;
  return Model{api::load(path, options)};
}

Model load_bytes(const py::bytes& bytes, const std::string& name, const Shapes& input_shapes) {
  std::string b = bytes;
  api::LoadOptions options = load_options(input_shapes);
  py::gil_scoped_release release;
  return Model{api::load_bytes(b, name, options)};
}

py::dict mutation_dict(const api::Mutation& m) {
  py::dict d(py::arg("stage") = m.stage, py::arg("rule") = m.rule, py::arg("verification") = m.verification);
  if (m.stage == "canonicalize") d["times"] = m.times;
  if (m.stage == "search") {
    d["subprogram"] = m.subprogram;
    d["partial"] = m.partial;
  }
  if (!m.description.empty()) d["description"] = m.description;
  return d;
}

// Outputs by name: the plan's global outputs (rank 0's for a mesh).
py::dict named_outputs(const Graph& g, const std::vector<Tensor>& outputs) {
  py::dict out;
  for (size_t i = 0; i < outputs.size(); ++i) out[py::str(g.value(g.outputs()[i]).name)] = to_numpy(outputs[i]);
  return out;
}

// An optimized model in memory and, for one device, its compiled plans (a
// mesh plan keeps its compiled ranks itself: api::Plan::compiled_).
struct Plan {
  api::Plan plan;
  ExecutableCache compiled;

  // The plan's inputs and outputs as the single-device model has them
  // (a mesh plan's rank programs take and give back blocks of the sharded
  // ones).
  const Graph& interface() const { return plan.is_mesh() ? plan.original : plan.model; }

  py::dict run(const py::object& inputs, const std::string& backend, int threads) {
    std::vector<Tensor> bound = bind(interface(), inputs);
    api::RunResult r;
    if (plan.is_mesh()) {
      py::gil_scoped_release release;
      r = api::run(plan, bound, run_config(backend, threads));
    } else {
      r = run_cached(compiled, plan.model, bound, backend, threads);
    }
    return named_outputs(interface(), r.outputs);
  }
};

Plan optimize(const Model& m, const std::string& device, const std::string& mesh, double budget, uint64_t seed,
                   bool partial, const std::vector<std::string>& disabled_rules, const std::vector<std::string>& shards,
                   const std::string& shard_file, bool shard_search, int64_t device_memory, int threads, bool measure,
                   const std::vector<std::string>& carry) {
  api::OptimizeConfig config;
  config.carry = carry;
  config.device = device;
  config.mesh = mesh;
  config.budget_s = budget;
  config.seed = seed;
  config.partial = partial;
  config.disabled_rules = disabled_rules;
  config.shards = shards;
  config.shard_file = shard_file;
  config.shard_search = shard_search;
  config.device_memory = device_memory;
  config.threads = threads;
  config.measure = measure;
  py::gil_scoped_release release;
  return Plan{api::optimize(m.graph, config), {}};
}

// A plan's session: steps with its carried state kept on the ranks.
struct Session {
  api::Session session;

  py::dict step(const py::dict& feeds) {
    std::map<std::string, Tensor> bound;
    for (auto [name, value] : feeds) bound[py::str(name)] = to_tensor(py::reinterpret_borrow<py::object>(value));
    std::map<std::string, Tensor> out;
    {
      py::gil_scoped_release release;
      out = session.step(bound);
    }
    py::dict d;
    for (const auto& [name, t] : out) d[py::str(name)] = to_numpy(t);
    return d;
  }
};

Session make_session(const Plan& p, const std::vector<std::string>& carry, const std::string& backend, int threads) {
  api::SessionOptions options;
  options.run = run_config(backend, threads);
  options.carry = carry;
  py::gil_scoped_release release;
  return Session{api::Session(p.plan, options)};
}

py::list differing_list(const api::Verdict& v) {
  py::list out;
  for (const api::DifferingOutput& d : v.differing) {
    py::list boxes;
    for (const api::Box& b : d.boxes) boxes.append(py::make_tuple(py::tuple(py::cast(b.lo)), py::tuple(py::cast(b.hi))));
    out.append(py::dict(py::arg("output") = d.output, py::arg("name") = d.name, py::arg("boxes") = boxes));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_tessera, m) {
  m.doc() = "The compiled half of the tessera package: bindings over the C++ embedding API.";
  // tessera.Error: its str() is the message `tessera` prints after "tessera: error: ",
  // its .kind the error kind as error_kind_name gives it ("usage error", "parse error", ...).
  // Never destroyed: a static py::object would be released after the interpreter is gone.
  static py::exception<Error>* error = new py::exception<Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::handle type = error->ptr();
      py::object instance = type(e.what());
      instance.attr("kind") = error_kind_name(e.kind());
      PyErr_SetObject(type.ptr(), instance.ptr());
    }
  });

  py::class_<Model>(m, "Model", "An imported model (statically shaped Tessera graph).")
      .def("summary", &Model::summary, "Inputs, outputs, ops by kind, parameters and FLOPs.")
      .def("run", &Model::run, py::arg("inputs"), py::arg("backend") = "cpu", py::arg("threads") = 0,
           "Runs the model on numpy inputs (a list in input order or a dict by name); returns the outputs.")
      .def("export", [](const Model& self, const std::string& path) { api::export_onnx(self.graph, path); },
           py::arg("path"), "Writes the model as ONNX (atomically).")
      .def("onnx_bytes", [](const Model& self) { return bytes_of(self.graph); }, "The model as serialized ONNX.")
      .def("random_inputs",
           [](const Model& self, uint64_t seed) {
             py::list out;
             for (const Tensor& t : api::random_inputs(self.graph, seed)) out.append(to_numpy(t));
             return out;
           },
           py::arg("seed") = 0, "Seeded random inputs, as `tessera run` makes them.");

  py::class_<Plan>(m, "Plan", "An optimized model in memory (tessera.Plan wraps it).")
      .def_property_readonly("mesh", [](const Plan& p) { return p.plan.mesh; })
      .def_property_readonly("is_mesh", [](const Plan& p) { return p.plan.is_mesh(); })
      .def_property_readonly("num_ranks", [](const Plan& p) { return p.plan.ranks.size(); })
      .def("model_bytes",
           [](const Plan& p, int64_t rank) {
             if (!p.plan.is_mesh()) return bytes_of(p.plan.model);
             if (rank < 0 || rank >= static_cast<int64_t>(p.plan.ranks.size()))
               TESSERA_THROW(ErrorKind::kUsage, "rank " << rank << " is not in 0.." << p.plan.ranks.size() - 1);
             return bytes_of(p.plan.ranks[static_cast<size_t>(rank)]);
           },
           py::arg("rank") = 0, "The optimized model (a mesh plan: rank `rank`'s program) as serialized ONNX.")
      .def_property_readonly("plan_json", [](const Plan& p) { return p.plan.plan_json; })
      .def_property_readonly("report_json", [](const Plan& p) { return p.plan.report_json; })
      .def_property_readonly("report_text", [](const Plan& p) { return p.plan.report_text; })
      .def_property_readonly("report_html", [](const Plan& p) { return p.plan.report_html; })
      .def_property_readonly("files", [](const Plan& p) { return p.plan.files(); })
      .def_property_readonly("mutations",
                             [](const Plan& p) {
                               py::list out;
                               for (const api::Mutation& mu : p.plan.mutations) out.append(mutation_dict(mu));
                               return out;
                             })
      .def("run", &Plan::run, py::arg("inputs"), py::arg("backend") = "cpu", py::arg("threads") = 0)
      .def("save",
           [](const Plan& p, const std::string& dir) {
             py::gil_scoped_release release;
             p.plan.save(dir);
           },
           py::arg("dir"));

  py::class_<api::Verdict>(m, "Verdict", "Whether a candidate computes the original's outputs.")
      .def_readonly("kind", &api::Verdict::kind)
      .def_readonly("method", &api::Verdict::method)
      .def_readonly("trials", &api::Verdict::trials)
      .def_readonly("degree", &api::Verdict::degree)
      .def_readonly("error_bound", &api::Verdict::error_bound)
      .def_readonly("reason", &api::Verdict::reason)
      .def_readonly("summary", &api::Verdict::summary)
      .def_property_readonly("equivalent", &api::Verdict::equivalent)
      .def_property_readonly("differing", &differing_list,
                             "Per differing output: its index, name and boxes ((lo...), (hi...)), half-open.")
      .def("__bool__", &api::Verdict::equivalent)
      .def("__repr__", [](const api::Verdict& v) { return "<tessera.Verdict " + v.summary + ">"; });

  m.def("load", &load, py::arg("path"), py::arg("input_shapes") = Shapes{},
        "Imports an ONNX model file (or a folder written by optimize).");
  m.def("load_bytes", &load_bytes, py::arg("data"), py::arg("name") = "<model>", py::arg("input_shapes") = Shapes{},
        "Imports a serialized ONNX model.");
  m.def("optimize", &optimize, py::arg("model"), py::arg("device"), py::arg("mesh"), py::arg("budget"),
        py::arg("seed"), py::arg("partial"), py::arg("disabled_rules"), py::arg("shards"), py::arg("shard_file"),
        py::arg("shard_search"), py::arg("device_memory"), py::arg("threads"), py::arg("measure"), py::arg("carry"),
        "Optimizes the model in memory; returns a Plan.");
  py::class_<Session>(m, "Session", "A plan run step after step, its carried state kept on the ranks.")
      .def("step", &Session::step, py::arg("feeds"),
           "One step: numpy inputs by name (carried ones only to set them); the outputs that are not carried.")
      .def("state", [](const Session& s, const std::string& input) { return to_numpy(s.session.state(input)); },
           py::arg("input"), "A carried input's state as the next step takes it (gathered from the ranks).")
      .def_property_readonly("carried",
                             [](const Session& s) {
                               py::list out;
                               for (const api::CarryPair& c : s.session.carried())
                                 out.append(py::make_tuple(c.output, c.input));
                               return out;
                             })
      .def_property_readonly("steps", [](const Session& s) { return s.session.steps(); });
  m.def("session", &make_session, py::arg("plan"), py::arg("carry"), py::arg("backend"), py::arg("threads"),
        "A Session over the plan.");
  m.def(
      "verify",
      [](const Model& a, const Model& b, uint64_t seed) {
        api::VerifyConfig config;
        config.seed = seed;
        py::gil_scoped_release release;
        return api::verify(a.graph, b.graph, config);
      },
      py::arg("original"), py::arg("candidate"), py::arg("seed") = api::VerifyConfig{}.seed);
  m.def(
      "cost_json",
      [](const Model& model, const std::string& device, bool fuse, bool cold, int top) {
        api::CostConfig config;
        config.device = device;
        config.fuse = fuse;
        config.cold = cold;
        config.top = top;
        py::gil_scoped_release release;
        return api::cost(model.graph, config).json;
      },
      py::arg("model"), py::arg("device") = "cpu", py::arg("fuse") = true, py::arg("cold") = false,
      py::arg("top") = 10, "What `tessera cost --json` prints.");
  m.def("list_rules", [] {
    py::list out;
    for (const api::RuleInfo& r : api::rules())
      out.append(py::dict(py::arg("name") = r.name, py::arg("kind") = r.kind, py::arg("identity") = r.identity,
                          py::arg("obligation") = r.obligation, py::arg("mesh_only") = r.mesh_only));
    return out;
  }, "The canonicalization passes and rewrite rules (tessera optimize --list-rules) as dicts.");
}

}  // namespace tessera::python
