// Model-level import: opset, graph inputs with their static shapes,
// initializers, a topological order of the nodes, and the graph outputs.
// Per-node conversion is in op_converters.cc.
#include "onnx_import/onnx_import.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_set>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "onnx/onnx_pb.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "onnx_import/if_branch.h"
#include "onnx_import/node_importer.h"
#include "onnx_import/tensor_proto.h"

namespace tessera {

namespace fs = std::filesystem;
using onnx_import::ImportState;
using onnx_import::NodeImporter;

void parse_input_shape_flag(const std::string& flag, ImportOptions& options) {
  size_t eq = flag.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size())
    TESSERA_THROW(ErrorKind::kUsage, "--input-shape '" << flag << "': expected name=DIMS, e.g. x=1x3x224x224");
  std::string name = flag.substr(0, eq), dims = flag.substr(eq + 1);
  Shape shape;
  if (dims != "scalar") {
    std::stringstream ss(dims);
    std::string part;
    while (std::getline(ss, part, 'x')) {
      bool digits = !part.empty() && part.size() <= 12 &&
                    part.find_first_not_of("0123456789") == std::string::npos;
      if (!digits)
        TESSERA_THROW(ErrorKind::kUsage, "--input-shape '" << flag << "': '" << part
                                                           << "' is not a dimension (use non-negative integers joined by 'x')");
      shape.push_back(std::stoll(part));
    }
    if (dims.back() == 'x')
      TESSERA_THROW(ErrorKind::kUsage, "--input-shape '" << flag << "': trailing 'x'");
  }
  options.input_shapes[name] = shape;
}

void parse_input_value_flag(const std::string& flag, ImportOptions& options) {
  size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size())
    TESSERA_THROW(ErrorKind::kUsage, "--input-value '" << flag << "': expected NAME=VALUE, e.g. use_cache_branch=1");
  options.input_values[flag.substr(0, eq)] = flag.substr(eq + 1);
}

bool glob_match(const std::string& pattern, const std::string& name) {
  // Greedy with backtracking to the last `*`: linear in practice.
  size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

bool is_glob(const std::string& s) { return s.find('*') != std::string::npos; }

// The --input-shape that fixes `name`: its own, else the one glob that
// matches it; nullptr if none.
const Shape* fixed_shape(const std::string& name, const ImportOptions& options) {
  auto exact = options.input_shapes.find(name);
  if (exact != options.input_shapes.end()) return &exact->second;
  const std::pair<const std::string, Shape>* found = nullptr;
  for (const auto& entry : options.input_shapes) {
    if (!is_glob(entry.first) || !glob_match(entry.first, name)) continue;
    if (found)
      TESSERA_THROW(ErrorKind::kUsage, "--input-shape: input '" << name << "' matches both '" << found->first
                                                                 << "' and '" << entry.first << "'");
    found = &entry;
  }
  return found ? &found->second : nullptr;
}

// The constant an --input-value gives an input of type `t`: every element
// holds the value.
Tensor input_value_tensor(const std::string& name, const std::string& text, const TensorType& t) {
  std::string flag = "--input-value " + name + "=" + text;
  int64_t count = t.numel();
  if (t.dtype == DType::kBool) {
    int64_t b = text == "1" || text == "true" ? 1 : text == "0" || text == "false" ? 0 : -1;
    if (b < 0)
      TESSERA_THROW(ErrorKind::kUsage, flag << ": input '" << name << "' is " << type_str(t) << ": give 0, 1, true or false");
    return Tensor::from_ints(t.dtype, t.shape, std::vector<int64_t>(static_cast<size_t>(count), b));
  }
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(number))
    TESSERA_THROW(ErrorKind::kUsage, flag << ": '" << text << "' is not a number");
  if (is_float(t.dtype)) return Tensor::from_doubles(t.dtype, t.shape, std::vector<double>(static_cast<size_t>(count), number));
  int64_t integer = 0;
  try {
    integer = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size())
    TESSERA_THROW(ErrorKind::kUsage, flag << ": input '" << name << "' is " << type_str(t) << ": give an integer");
  Tensor v = Tensor::from_ints(t.dtype, t.shape, std::vector<int64_t>(static_cast<size_t>(count), integer));
  if (count > 0 && v.to_ints()[0] != integer)
    TESSERA_THROW(ErrorKind::kUsage, flag << ": " << integer << " does not fit input '" << name << "' ("
                                          << type_str(t) << ")");
  return v;
}

int64_t default_opset(const onnx::ModelProto& model) {
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") return op.version();
  TESSERA_THROW(ErrorKind::kInvalidGraph, "the model imports no opset of the default ONNX domain");
}

TensorType input_type(const onnx::ValueInfoProto& vi, const ImportOptions& options) {
  const std::string& name = vi.name();
  if (!vi.type().has_tensor_type())
    TESSERA_THROW(ErrorKind::kUnsupported, "input '" << name << "' is not a tensor");
  const auto& tt = vi.type().tensor_type();
  TensorType type;
  try {
    type.dtype = dtype_from_onnx(tt.elem_type());
  } catch (const Error& e) {
    TESSERA_THROW(ErrorKind::kUnsupported, "input '" << name << "': " << e.message());
  }
  if (const Shape* fixed = fixed_shape(name, options)) {
    if (tt.has_shape() && tt.shape().dim_size() != static_cast<int>(fixed->size()))
      TESSERA_THROW(ErrorKind::kUsage, "--input-shape " << name << "=" << shape_str(*fixed) << " has rank "
                                                        << fixed->size() << ", the model's input has rank "
                                                        << tt.shape().dim_size());
    type.shape = *fixed;
    return type;
  }
  if (!tt.has_shape())
    TESSERA_THROW(ErrorKind::kInvalidGraph, "input '" << name << "' has no shape (unknown rank): fix it with --input-shape "
                                                      << name << "=...");
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      type.shape.push_back(dim.dim_value());
    } else if (options.default_dim >= 0) {
      type.shape.push_back(options.default_dim);
    } else {
      std::string label = dim.has_dim_param() && !dim.dim_param().empty() ? " ('" + dim.dim_param() + "')" : "";
      TESSERA_THROW(ErrorKind::kInvalidGraph, "input '" << name << "' dim " << d << label
                                                        << " is dynamic: fix it with --input-shape " << name << "=...");
    }
  }
  return type;
}

// Kahn's algorithm over the ONNX nodes, keeping file order among ready nodes.
std::vector<int> node_order(const onnx::GraphProto& g, const ImportState& state,
                            const std::vector<std::string>& node_names) {
  int n = g.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i)
    for (const std::string& out : g.node(i).output())
      if (!out.empty()) producer[out] = i;
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> consumers(n);
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> reads(g.node(i).input().begin(), g.node(i).input().end());
    // An If's branches read outer values by name: dependencies too.
    std::vector<std::string> implicit = onnx_import::subgraph_reads(g.node(i));
    std::unordered_set<std::string> seen(reads.begin(), reads.end());
    for (const std::string& s : implicit)
      if (seen.insert(s).second) reads.push_back(s);
    for (size_t r = 0; r < reads.size(); ++r) {
      const std::string& in = reads[r];
      if (in.empty()) continue;
      bool explicit_input = r < static_cast<size_t>(g.node(i).input_size());
      auto it = producer.find(in);
      if (it != producer.end()) {
        ++pending[i];
        consumers[it->second].push_back(i);
      } else if (!state.values.count(in)) {
        throw Error(ErrorKind::kInvalidGraph,
                    (explicit_input ? "input '" : "a subgraph reads '") + in +
                        "', which is not defined by any node, initializer or graph input",
                    {"", node_names[i], g.node(i).op_type()});
      }
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int c : consumers[i])
      if (--pending[c] == 0) ready.push(c);
  }
  if (static_cast<int>(order.size()) != n) {
    for (int i = 0; i < n; ++i)
      if (pending[i] > 0)
        throw Error(ErrorKind::kInvalidGraph, "the graph has a cycle through this node",
                    {"", node_names[i], g.node(i).op_type()});
  }
  return order;
}

std::vector<std::string> unique_node_names(const onnx::GraphProto& g) {
  std::unordered_set<std::string> taken;
  for (const auto& node : g.node())
    if (!node.name().empty()) taken.insert(node.name());
  std::vector<std::string> names;
  std::unordered_set<std::string> given;
  for (int i = 0; i < g.node_size(); ++i) {
    std::string name = g.node(i).name();
    if (name.empty() || given.count(name)) {
      std::string base = (name.empty() ? g.node(i).op_type() : name) + "_";
      int k = i;
      do name = base + std::to_string(k++);
      while (taken.count(name) || given.count(name));
    }
    given.insert(name);
    names.push_back(name);
  }
  return names;
}

void collect_names(const onnx::GraphProto& g, ImportState& state) {
  for (const auto& vi : g.input()) state.onnx_value_names.insert(vi.name());
  for (const auto& t : g.initializer()) state.onnx_value_names.insert(t.name());
  for (const auto& node : g.node()) {
    for (const auto& s : node.output()) state.onnx_value_names.insert(s);
    for (const auto& s : node.input()) state.read_names.insert(s);
  }
  state.reserved_names = state.onnx_value_names;
  // Names in subgraphs: fresh names avoid them, and what a branch reads
  // counts as read (an input only one branch reads is not unused).
  for (const auto& node : g.node()) onnx_import::subgraph_names(node, state.onnx_value_names, state.read_names);
  for (const auto& vi : g.output()) {
    state.graph_outputs.insert(vi.name());
    state.read_names.insert(vi.name());
  }
}

}  // namespace

namespace {

// The importer; with `release` (the same model, owned by the caller and not
// needed after), each initializer's bytes are freed once converted, so that
// the parsed model and the graph do not both hold every weight (peak memory
// of a 440 MB bert_base: 2x the weights without, 1x plus one tensor with).
Graph import_model(const onnx::ModelProto& model, const ImportOptions& options, const std::string& model_dir,
                   const std::string& display_name, onnx::ModelProto* release);

}  // namespace

Graph import_onnx_model(const onnx::ModelProto& model, const ImportOptions& options, const std::string& model_dir,
                        const std::string& display_name) {
  return import_model(model, options, model_dir, display_name, nullptr);
}

namespace {

// Inputs a caller would feed for nothing, or feed to no effect: refused with
// the way out named (ImportOptions).
void check_graph_inputs(const onnx::ModelProto& model, const ImportState& state, const ImportOptions& options) {
  const onnx::GraphProto& g = model.graph();
  std::unordered_set<std::string> initializers;
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  for (const auto& vi : g.input()) {
    if (initializers.count(vi.name()) && !options.initializers_as_constants)
      TESSERA_THROW(ErrorKind::kInvalidGraph,
                    "graph input '" << vi.name() << "' is also an initializer (a default a caller may override); "
                    "Tessera folds weights as constants: pass --initializers-as-constants to accept that, or "
                    "re-export without the weights among the inputs");
    bool ours = model.producer_name() == "tessera";
    if (!state.read_names.count(vi.name()) && !initializers.count(vi.name()) && !options.allow_unused_inputs && !ours)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "graph input '" << vi.name()
                                                              << "' is read by no node: pass --allow-unused-inputs "
                                                                 "to keep it as an input the plan ignores");
  }
}

// One ONNX node of the default domain (or Tessera's collectives) into the
// graph; an If with a constant condition becomes the branch it selects.
void import_graph_nodes(ImportState& state, const onnx::ModelProto& model, const onnx::GraphProto& g);

void import_node(ImportState& state, const onnx::ModelProto& model, const onnx::NodeProto& proto,
                 const std::string& node_name) {
  Graph& graph = state.graph;
  if (!proto.domain().empty() && proto.domain() != "ai.onnx" && proto.domain() != "tessera") {
    int64_t version = 0;
    for (const auto& op : model.opset_import())
      if (op.domain() == proto.domain()) version = op.version();
    throw Error(ErrorKind::kUnsupported,
                "op '" + proto.op_type() + "' of domain '" + proto.domain() + "' (opset " + std::to_string(version) +
                    ") is not supported: Tessera reads the default ONNX domain only",
                {"", node_name, proto.op_type()});
  }
  // Every ONNX op has at least one output, and the converters name what
  // they make after output 0 (found by fuzz/onnx_import_fuzz: a Cast with
  // none reached protobuf's index check).
  if (proto.output_size() == 0)
    throw Error(ErrorKind::kInvalidGraph, "the node has no outputs", {"", node_name, proto.op_type()});
  if (proto.op_type() == "If" && proto.domain() != "tessera") {
    onnx_import::import_if(state, proto, node_name,
                           [&](const onnx::GraphProto& branch) { import_graph_nodes(state, model, branch); });
    return;
  }
  NodeImporter importer(state, proto, node_name);
  NodeId first_new = graph.num_nodes();
  try {
    onnx_import::convert_node(importer);
    // A tensor the process could never hold is refused here, before
    // anything allocates it, with the node that makes it.
    for (NodeId n = first_new; n < graph.num_nodes(); ++n)
      for (ValueId o : graph.node(n).outputs)
        if (o != kNoValue)
          check_memory(graph.type(o).nbytes(), "output '" + graph.value(o).name + "' (" + type_str(graph.type(o)) + ")");
  } catch (const Error& e) {
    throw e.with_context({"", node_name, proto.op_type()});
  }
}

void import_graph_nodes(ImportState& state, const onnx::ModelProto& model, const onnx::GraphProto& g) {
  std::vector<std::string> node_names = unique_node_names(g);
  for (int i : node_order(g, state, node_names)) import_node(state, model, g.node(i), node_names[i]);
}

Graph import_model(const onnx::ModelProto& model, const ImportOptions& options, const std::string& model_dir,
                   const std::string& display_name, onnx::ModelProto* release) {
  Graph graph;
  const onnx::GraphProto& g = model.graph();
  graph.name = g.name().empty() ? "graph" : g.name();
  try {
    ImportState state{graph};
    state.opset = default_opset(model);
    state.external = ExternalData(model_dir);
    collect_names(g, state);
    for (const auto& [name, shape] : options.input_shapes) {
      bool found = false;
      for (const auto& vi : g.input()) found = found || vi.name() == name || (is_glob(name) && glob_match(name, vi.name()));
      if (!found && is_glob(name))
        TESSERA_THROW(ErrorKind::kUsage, "--input-shape '" << name << "' matches no input of the model");
      if (!found) TESSERA_THROW(ErrorKind::kUsage, "--input-shape names '" << name << "', which is not an input of the model");
    }
    for (const auto& [name, text] : options.input_values) {
      bool found = false;
      for (const auto& vi : g.input()) found = found || vi.name() == name;
      if (!found) TESSERA_THROW(ErrorKind::kUsage, "--input-value names '" << name << "', which is not an input of the model");
    }
    for (int i = 0; i < g.initializer_size(); ++i) {
      const onnx::TensorProto& t = g.initializer(i);
      if (state.values.count(t.name()))
        TESSERA_THROW(ErrorKind::kInvalidGraph, "initializer '" << t.name() << "' is defined twice");
      state.values[t.name()] = graph.add_constant(t.name(), tensor_from_proto(t, state.external, "initializer '" + t.name() + "'"));
      if (release) std::string().swap(*release->mutable_graph()->mutable_initializer(i)->mutable_raw_data());
    }
    for (const auto& vi : g.input())
      if (!state.values.count(vi.name())) {
        TensorType t = input_type(vi, options);
        std::string what = "graph input '" + vi.name() + "' (" + type_str(t) + ")";
        int64_t bytes = 0;
        try {
          bytes = t.nbytes();
        } catch (const Error& e) {
          TESSERA_THROW(e.kind(), what << ": " << e.message());
        }
        check_memory(bytes, what);
        auto value = options.input_values.find(vi.name());
        state.values[vi.name()] = value == options.input_values.end()
                                      ? graph.add_input(vi.name(), t)
                                      : graph.add_constant(vi.name(), input_value_tensor(vi.name(), value->second, t));
      }

    import_graph_nodes(state, model, g);
    // After the nodes, whose own errors name them and are more specific.
    check_graph_inputs(model, state, options);
    // A graph that computes nothing is an exporter's mistake, not a model:
    // running it would succeed and print nothing.
    if (g.output_size() == 0) TESSERA_THROW(ErrorKind::kInvalidGraph, "the graph has no outputs");
    std::vector<ValueId> outputs;
    for (const auto& vi : g.output()) {
      auto it = state.values.find(vi.name());
      if (it == state.values.end())
        TESSERA_THROW(ErrorKind::kInvalidGraph, "graph output '" << vi.name() << "' is not defined");
      outputs.push_back(it->second);
    }
    graph.set_outputs(outputs);
    graph.remove_dead();
  } catch (const Error& e) {
    throw e.with_context({display_name, "", ""});
  }
  return graph;
}

// A file read for protobuf that reports the bytes read so far.
class ReportingInput : public google::protobuf::io::CopyingInputStream {
 public:
  ReportingInput(std::istream& in, int64_t total, const ProgressFn& progress)
      : in_(in), total_(total), progress_(progress) {}
  int Read(void* buffer, int size) override {
    in_.read(static_cast<char*>(buffer), size);
    auto n = static_cast<int>(in_.gcount());
    if (n == 0) return in_.bad() ? -1 : 0;
    done_ += n;
    progress_({"loading", "", done_, total_, true});
    return n;
  }

 private:
  std::istream& in_;
  int64_t total_, done_ = 0;
  const ProgressFn& progress_;
};

bool parse_model(std::ifstream& in, int64_t size, const ProgressFn& progress, onnx::ModelProto& model) {
  if (!progress) return model.ParseFromIstream(&in);
  ReportingInput reporting(in, size, progress);
  google::protobuf::io::CopyingInputStreamAdaptor stream(&reporting, 4 << 20);
  return model.ParseFromZeroCopyStream(&stream);
}

}  // namespace

Graph import_onnx_file(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) TESSERA_THROW(ErrorKind::kIo, path << ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) TESSERA_THROW(ErrorKind::kIo, path << ": cannot open for reading");
  // Parsed from the stream, not from a copy of the file: the bytes, the parsed
  // model and the graph alive together made peak memory 3x the weights
  // (bert_base: 1.4 GB for 440 MB; import_model frees the parsed ones).
  uintmax_t size = fs::file_size(path, ec);
  if (ec) TESSERA_THROW(ErrorKind::kIo, path << ": read failed");
  onnx::ModelProto model;
  std::string why;
  if (size == 0) why = "the file is empty";
  else if (!parse_model(in, static_cast<int64_t>(size), options.progress, model)) why = in.bad() ? "read failed" : "protobuf parse failed: truncated or not a ModelProto";
  else if (!model.has_graph() || model.opset_import_size() == 0) why = "no graph or no opset_import";
  if (!why.empty()) TESSERA_THROW(ErrorKind::kParse, path << ": not a valid ONNX model (" << why << ")");
  fs::path dir = fs::path(path).parent_path();
  return import_model(model, options, dir.string(), path, &model);
}

}  // namespace tessera
