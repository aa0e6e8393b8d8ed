#include "graph/interpreter.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "graph/error.h"
#include "graph/liveness.h"
#include "graph/memory_limit.h"
#include "graph/number.h"

namespace tessera {

template <class T>
RefTensor<T> to_ref(const Tensor& t) {
  RefTensor<T> r;
  r.type = t.type();
  int64_t n = t.numel();
  if (r.is_num()) {
    r.num.resize(static_cast<size_t>(n));
    if constexpr (std::is_same_v<T, float>) {
      // The end-to-end check converts every weight of the model once per
      // run: TinyLlama's 1.1G f32 values element by element through
      // get_double took most of its 80 s. The bytes are read once (a
      // mapped weight's pages, a rank's made block, leave memory after):
      // the converted copy is what is read now.
      if (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16) {
        float* out = r.num.data();
        bool bf16 = t.dtype() == DType::kBF16;
        t.read_once([&](const uint8_t* p) {
          if (n == 0) return;
          if (!bf16) {
            std::memcpy(out, p, static_cast<size_t>(n) * sizeof(float));
            return;
          }
          // bf16 is the high half of an f32: exact, and vectorized.
          const auto* h = reinterpret_cast<const uint16_t*>(p);
          auto* o = reinterpret_cast<uint32_t*>(out);
          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<uint32_t>(h[i]) << 16;
        });
        t.drop_mapped_pages();  // made bytes an earlier reader kept
        return r;
      }
    }
    for (int64_t i = 0; i < n; ++i) r.num[i] = num_from_double<T>(t.get_double(i));
  } else {
    r.ints = t.to_ints();
  }
  t.drop_mapped_pages();  // the converted copy is what is read now
  return r;
}

template <class T>
Tensor from_ref(const RefTensor<T>& r) {
  Tensor t(r.type.dtype, r.type.shape);
  int64_t n = r.numel();
  if (r.is_num()) {
    TESSERA_CHECK(static_cast<int64_t>(r.num.size()) == n, "tensor data size mismatch");
    for (int64_t i = 0; i < n; ++i) t.set_double(i, num_to_double(r.num[i]));
  } else {
    TESSERA_CHECK(static_cast<int64_t>(r.ints.size()) == n, "tensor data size mismatch");
    for (int64_t i = 0; i < n; ++i) t.set_int(i, r.ints[i]);
  }
  return t;
}

namespace {

template <class T>
EvalFn<T> eval_for(const OpDef& def) {
  EvalFn<T> fn;
  if constexpr (std::is_same_v<T, float>) fn = def.eval_f32;
  else if constexpr (std::is_same_v<T, double>) fn = def.eval_f64;
  else fn = def.eval_zp;
  if (!fn) TESSERA_THROW(ErrorKind::kUnsupported, "op has no reference kernel");
  return fn;
}

// Rounds results of 16-bit float dtypes, so float evaluation of an f16 graph
// sees the values an f16 device would store.
template <class T>
void round_to_dtype(RefTensor<T>& t) {
  if constexpr (!kIsZp<T>) {
    if (t.type.dtype == DType::kF16)
      for (T& x : t.num) x = static_cast<T>(half_to_float(float_to_half(static_cast<float>(x))));
    else if (t.type.dtype == DType::kBF16)
      for (T& x : t.num) x = static_cast<T>(bf16_to_float(float_to_bf16(static_cast<float>(x))));
    else if (t.type.dtype == DType::kF32 && std::is_same_v<T, double>)
      for (T& x : t.num) x = static_cast<T>(static_cast<float>(x));
  }
}

// The per-rank state of one evaluation: every value's tensor, freed after its
// last use. A constant is converted when its first reader runs (value_of),
// not up front: a model's weights are never all converted at once.
template <class T>
using ConstKey = std::tuple<const void*, DType, Shape>;

// Constants converted once for all the ranks whose programs hold the same
// bytes (a weight replicated over the mesh), keyed by the bytes' identity
// and type: kept while some rank still reads one.
template <class T>
using ConstCache = std::map<ConstKey<T>, std::weak_ptr<const RefTensor<T>>>;

template <class T>
struct Env {
  std::vector<RefTensor<T>> values;
  std::vector<std::shared_ptr<const RefTensor<T>>> consts;  // a constant's converted value, where read
  std::vector<bool> ready;
  ConstCache<T>* shared = nullptr;  // set where ranks run in lockstep
};

// Taken by value: a caller done with its inputs moves them in, and they are
// freed after their last reader instead of kept to the end.
template <class T>
void bind_inputs(const Graph& g, std::vector<RefTensor<T>> inputs, Env<T>& env) {
  env.values.assign(static_cast<size_t>(g.num_values()), RefTensor<T>{});
  env.consts.assign(static_cast<size_t>(g.num_values()), nullptr);
  env.ready.assign(static_cast<size_t>(g.num_values()), false);
  if (inputs.size() != g.inputs().size())
    TESSERA_THROW(ErrorKind::kUsage, "graph takes " << g.inputs().size() << " inputs, got " << inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueId v = g.inputs()[i];
    if (inputs[i].type != g.type(v))
      TESSERA_THROW(ErrorKind::kUsage, "input '" << g.value(v).name << "' must be " << type_str(g.type(v))
                                                 << ", got " << type_str(inputs[i].type));
    size_t want = static_cast<size_t>(inputs[i].numel());
    if ((inputs[i].is_num() ? inputs[i].num.size() : inputs[i].ints.size()) != want)
      TESSERA_THROW(ErrorKind::kUsage, "input '" << g.value(v).name << "' has the wrong amount of data");
    env.values[v] = std::move(inputs[i]);
    env.ready[v] = true;
  }
}

// Value `v` for a reader: computed already, or a constant converted now.
template <class T>
const RefTensor<T>& value_of(const Graph& g, ValueId v, Env<T>& env) {
  if (!env.ready[v] && g.value(v).constant) {
    const Tensor& c = *g.value(v).constant;
    std::shared_ptr<const RefTensor<T>> ref;
    std::weak_ptr<const RefTensor<T>>* slot = nullptr;
    if (env.shared && c.bytes_identity()) {
      slot = &(*env.shared)[ConstKey<T>{c.bytes_identity(), c.dtype(), c.shape()}];
      ref = slot->lock();
    }
    if (!ref) {
      ref = std::make_shared<const RefTensor<T>>(to_ref<T>(c));
      if (slot) *slot = ref;
    }
    env.consts[v] = std::move(ref);
    env.ready[v] = true;
  }
  TESSERA_CHECK(env.ready[v], "value '" << g.value(v).name << "' read before it is computed");
  return env.consts[v] ? *env.consts[v] : env.values[v];
}

// Bytes the interpreter holds at its peak running `g` in `order`
// (graph/liveness.h): a number is T, an integer an int64.
template <class T>
int64_t peak_bytes(const Graph& g, const std::vector<NodeId>& order) {
  return peak_live_bytes(g, order, [&](ValueId v) {
    const TensorType& t = g.type(v);
    return t.numel() * static_cast<int64_t>(is_float(t.dtype) ? sizeof(T) : sizeof(int64_t));
  });
}

// `node`'s reference kernel on args' inputs: its outputs, typed as `g` says;
// an error names the node.
template <class T>
std::vector<RefTensor<T>> eval_node(const Graph& g, const Node& node, EvalArgs<T> args) {
  std::vector<RefTensor<T>> outs(node.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) outs[i].type = g.type(node.outputs[i]);
  args.outputs = &outs;
  try {
    eval_for<T>(op_def(node.kind))(args);
  } catch (const Error& e) {
    throw e.with_context({"", node.name, op_name(node.kind)});
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kInternal, e.what(), {"", node.name, op_name(node.kind)});
  }
  return outs;
}

template <class T>
void run_node(const Graph& g, const Node& node, Env<T>& env, const MeshEvalContext* mesh) {
  EvalArgs<T> args{node, {}, nullptr, mesh};
  for (ValueId in : node.inputs) {
    if (in == kNoValue) {
      args.inputs.push_back(nullptr);
      continue;
    }
    args.inputs.push_back(&value_of(g, in, env));
  }
  std::vector<RefTensor<T>> outs = eval_node(g, node, args);
  for (size_t i = 0; i < outs.size(); ++i) {
    RefTensor<T>& o = outs[i];
    size_t have = o.is_num() ? o.num.size() : o.ints.size();
    TESSERA_CHECK(have == static_cast<size_t>(o.numel()),
                  node.name << " (" << op_name(node.kind) << ") output " << i << " has " << have
                            << " elements, expected " << o.numel());
    round_to_dtype(o);
    env.values[node.outputs[i]] = std::move(o);
    env.ready[node.outputs[i]] = true;
  }
}

template <class T>
void release_dead(const Node& node, int64_t k, const std::vector<int64_t>& last, Env<T>& env) {
  for (ValueId in : node.inputs)
    if (in != kNoValue && last[in] == k) {
      env.values[in] = RefTensor<T>{};
      env.consts[in].reset();
      env.ready[in] = false;
    }
  // What nothing reads is dropped as soon as it is made (peak_live_bytes).
  for (ValueId out : node.outputs)
    if (last[out] < 0) {
      env.values[out] = RefTensor<T>{};
      env.ready[out] = false;
    }
}

template <class T>
std::vector<RefTensor<T>> outputs_of(const Graph& g, Env<T>& env) {
  std::vector<RefTensor<T>> outs;
  for (ValueId v : g.outputs()) outs.push_back(value_of(g, v, env));
  return outs;
}

}  // namespace

template <class T>
std::vector<RefTensor<T>> interpret(const Graph& g, const std::vector<RefTensor<T>>& inputs) {
  std::vector<NodeId> order = g.topo_order();
  std::vector<int64_t> last = last_uses(g, order);
  check_memory(peak_bytes<T>(g, order), "the reference interpreter on graph '" + g.name + "'");
  Env<T> env;
  bind_inputs(g, inputs, env);
  for (size_t k = 0; k < order.size(); ++k) {
    const Node& node = g.node(order[k]);
    if (op_def(node.kind).is_collective())
      throw Error(ErrorKind::kUsage, "collective op needs a device mesh: use interpret_on_mesh",
                  {"", node.name, op_name(node.kind)});
    run_node(g, node, env, nullptr);
    release_dead(node, static_cast<int64_t>(k), last, env);
  }
  return outputs_of(g, env);
}

namespace {

// Runs instance i = s * ranks + r (input set s on rank r: graphs[r] on
// inputs[i]) in lockstep with every other, one step of all at a time; a
// collective exchanges among the ranks of one set. Constants the programs
// hold alike (a replicated weight, every set's copy of a weight) are
// converted once per step. `mesh` null: one rank, no collectives.
template <class T>
std::vector<std::vector<RefTensor<T>>> run_lockstep(const std::vector<const Graph*>& graphs, const DeviceMesh* mesh,
                                                    std::vector<std::vector<RefTensor<T>>> inputs,
                                                    const StepFn& steps) {
  const int64_t ranks = static_cast<int64_t>(graphs.size());
  const size_t instances = inputs.size();
  std::vector<std::vector<NodeId>> order;
  std::vector<std::vector<int64_t>> last;
  std::vector<Env<T>> envs(instances);
  ConstCache<T> shared;
  for (Env<T>& env : envs) env.shared = &shared;
  int64_t need = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    const Graph& g = *graphs[static_cast<size_t>(r)];
    order.push_back(g.topo_order());
    last.push_back(last_uses(g, order.back()));
    if (order.back().size() != order[0].size())
      TESSERA_THROW(ErrorKind::kInvalidGraph, "rank " << r << "'s program has " << order.back().size()
                                                      << " nodes, rank 0's " << order[0].size());
    // Every set of this rank: a constant is counted in each, though they share it.
    need += peak_bytes<T>(g, order.back()) * static_cast<int64_t>(instances / static_cast<size_t>(ranks));
  }
  check_memory(need, "the reference interpreter on " +
                         (mesh ? std::to_string(ranks) + " ranks of '" : std::string("graph '")) + graphs[0]->name +
                         "'" + (instances > static_cast<size_t>(ranks)
                                    ? " (" + std::to_string(instances / static_cast<size_t>(ranks)) + " input sets)"
                                    : std::string()));
  auto rank_of = [&](size_t i) { return static_cast<int64_t>(i % static_cast<size_t>(ranks)); };
  auto graph_of = [&](size_t i) -> const Graph& { return *graphs[static_cast<size_t>(rank_of(i))]; };
  for (size_t i = 0; i < instances; ++i) bind_inputs(graph_of(i), std::move(inputs[i]), envs[i]);
  auto node_of = [&](int64_t r, size_t k) -> const Node& { return graphs[static_cast<size_t>(r)]->node(order[r][k]); };
  const auto total = static_cast<int64_t>(order[0].size());
  // The ranks' collectives meet with the same attributes, except a halo
  // exchange's coordinate, which is each rank's own (its eval checks it).
  auto same_collective = [](const Node& a, const Node& b) {
    if (a.kind != b.kind) return false;
    if (a.kind != OpKind::kHaloExchange) return a.attrs == b.attrs;
    Attrs x = a.attrs, y = b.attrs;
    x.erase("coordinate");
    y.erase("coordinate");
    return x == y;
  };
  for (size_t k = 0; k < order[0].size(); ++k) {
    if (steps) steps(static_cast<int64_t>(k), total);
    const Node& node = node_of(0, k);
    bool collective = op_def(node.kind).is_collective();
    if (collective && !mesh)
      throw Error(ErrorKind::kUsage, "collective op needs a device mesh: use interpret_on_mesh",
                  {"", node.name, op_name(node.kind)});
    for (int64_t r = 1; r < ranks; ++r)
      if (collective != op_def(node_of(r, k).kind).is_collective() ||
          (collective && !same_collective(node_of(r, k), node)))
        TESSERA_THROW(ErrorKind::kInvalidGraph, "the ranks' programs differ at step " << k << ": rank 0 runs "
                                                    << node.name << " (" << op_name(node.kind) << "), rank " << r
                                                    << " " << node_of(r, k).name << " (" << op_name(node_of(r, k).kind) << ")");
    if (!collective) {
      for (size_t i = 0; i < instances; ++i) run_node(graph_of(i), node_of(rank_of(i), k), envs[i], nullptr);
    } else {
      for (size_t first = 0; first < instances; first += static_cast<size_t>(ranks)) {
        // Every rank of the set reads its peers' inputs before any output is stored.
        std::vector<const void*> peers;
        std::vector<const RefTensor<T>*> firsts;
        for (int64_t r = 0; r < ranks; ++r) {
          size_t i = first + static_cast<size_t>(r);
          firsts.push_back(&value_of(graph_of(i), node_of(r, k).inputs[0], envs[i]));
          peers.push_back(firsts.back());
        }
        std::vector<std::vector<RefTensor<T>>> results(static_cast<size_t>(ranks));
        for (int64_t r = 0; r < ranks; ++r) {
          const Node& mine = node_of(r, k);
          MeshEvalContext ctx{mesh, r, peers};
          results[r] = eval_node(*graphs[static_cast<size_t>(r)], mine,
                                 EvalArgs<T>{mine, {firsts[static_cast<size_t>(r)]}, nullptr, &ctx});
        }
        for (int64_t r = 0; r < ranks; ++r) {
          const Node& mine = node_of(r, k);
          Env<T>& env = envs[first + static_cast<size_t>(r)];
          for (size_t o = 0; o < mine.outputs.size(); ++o) {
            env.values[mine.outputs[o]] = std::move(results[r][o]);
            env.ready[mine.outputs[o]] = true;
          }
        }
      }
    }
    for (size_t i = 0; i < instances; ++i)
      release_dead(node_of(rank_of(i), k), static_cast<int64_t>(k), last[rank_of(i)], envs[i]);
  }
  std::vector<std::vector<RefTensor<T>>> outs(instances);
  for (size_t i = 0; i < instances; ++i) outs[i] = outputs_of(graph_of(i), envs[i]);
  if (steps) steps(total, total);
  return outs;
}

}  // namespace

template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_sets(const Graph& g, const std::vector<std::vector<RefTensor<T>>>& sets,
                                                      const StepFn& steps) {
  if (sets.empty()) return {};
  return run_lockstep<T>({&g}, nullptr, sets, steps);
}

template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_ranks(const std::vector<const Graph*>& graphs, const DeviceMesh& mesh,
                                                       const std::vector<std::vector<RefTensor<T>>>& inputs) {
  int64_t ranks = mesh.num_devices();
  if (static_cast<int64_t>(inputs.size()) != ranks || static_cast<int64_t>(graphs.size()) != ranks)
    TESSERA_THROW(ErrorKind::kUsage, "mesh " << mesh.str() << " has " << ranks << " ranks, got " << graphs.size()
                                             << " programs and inputs for " << inputs.size());
  return run_lockstep<T>(graphs, &mesh, inputs, {});
}

template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_ranks_sets(const std::vector<const Graph*>& graphs, const DeviceMesh& mesh,
                                                            std::vector<std::vector<RefTensor<T>>> inputs,
                                                            const StepFn& steps) {
  int64_t ranks = mesh.num_devices();
  if (static_cast<int64_t>(graphs.size()) != ranks || inputs.size() % static_cast<size_t>(ranks) != 0)
    TESSERA_THROW(ErrorKind::kUsage, "mesh " << mesh.str() << " has " << ranks << " ranks, got " << graphs.size()
                                             << " programs and inputs for " << inputs.size());
  if (inputs.empty()) return {};
  return run_lockstep<T>(graphs, &mesh, std::move(inputs), steps);
}

template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_on_mesh(const Graph& g, const DeviceMesh& mesh,
                                                         const std::vector<std::vector<RefTensor<T>>>& inputs) {
  return interpret_ranks<T>(std::vector<const Graph*>(static_cast<size_t>(mesh.num_devices()), &g), mesh, inputs);
}

std::vector<Tensor> evaluate(const Graph& g, const std::vector<Tensor>& inputs, Precision precision) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    std::vector<RefTensor<T>> ins;
    for (const Tensor& t : inputs) ins.push_back(to_ref<T>(t));
    std::vector<Tensor> outs;
    for (const RefTensor<T>& r : interpret<T>(g, ins)) outs.push_back(from_ref<T>(r));
    return outs;
  };
  return precision == Precision::kF32 ? run(float{}) : run(double{});
}

#define TESSERA_INSTANTIATE(T)                                                                         \
  template RefTensor<T> to_ref<T>(const Tensor&);                                                      \
  template Tensor from_ref<T>(const RefTensor<T>&);                                                    \
  template std::vector<RefTensor<T>> interpret<T>(const Graph&, const std::vector<RefTensor<T>>&);     \
  template std::vector<std::vector<RefTensor<T>>> interpret_on_mesh<T>(                                \
      const Graph&, const DeviceMesh&, const std::vector<std::vector<RefTensor<T>>>&);                  \
  template std::vector<std::vector<RefTensor<T>>> interpret_ranks<T>(                                  \
      const std::vector<const Graph*>&, const DeviceMesh&, const std::vector<std::vector<RefTensor<T>>>&); \
  template std::vector<std::vector<RefTensor<T>>> interpret_ranks_sets<T>(                             \
      const std::vector<const Graph*>&, const DeviceMesh&, std::vector<std::vector<RefTensor<T>>>,        \
      const StepFn&);                                                                                  \
  template std::vector<std::vector<RefTensor<T>>> interpret_sets<T>(                                   \
      const Graph&, const std::vector<std::vector<RefTensor<T>>>&, const StepFn&);
TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(double)
TESSERA_INSTANTIATE(Zp)
#undef TESSERA_INSTANTIATE

}  // namespace tessera
