// api::Session: a plan compiled once and run step after step, with its
// carried state (a KV cache) kept where the last step left it: on one
// device, on every rank as threads, or on this process's rank under mpirun.
// A carried output's blocks are handed to the next step as its inputs on the
// rank that made them; only the outputs that are not carried are gathered.
//
// A carried input is donated to the step (ExecutablePlan::run with donated
// inputs): where the plan computes its output in place over it (a
// fixed-length cache written at cache_position), the step writes only the
// new entries into the buffer it holds, and that buffer is the next step's
// input: one buffer per carried tensor per rank, for the whole session.
#include <filesystem>
#include <cstring>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "graph/error.h"
#include "graph/strategy.h"
#include "mutator/carry.h"
#include "tools/api/mesh_detail.h"
#include "tools/api/run_detail.h"
#include "tools/api/tessera.h"

namespace tessera::api {

namespace fs = std::filesystem;

struct Session::State {
  enum class Mode { kOne, kThreads, kMpi } mode = Mode::kOne;
  std::optional<runtime::ExecutablePlan> one;  // kOne
  MeshExecutable::State threads;               // kThreads
  std::unique_ptr<detail::MpiRank> mpi;        // kMpi
  detail::Boundary boundary;
  RunConfig config;
  std::vector<CarryPair> carry;
  std::vector<int> carried_from;              // per input: the output that feeds it, or -1
  std::vector<bool> carried_out;              // per output: feeds an input
  std::vector<std::vector<Tensor>> state;     // per rank run here, per input: its carried block
  std::vector<bool> has_state;                // per input: a step or a feed has set it (else zeros)
  int64_t steps = 0;

  int64_t local_ranks() const { return mode == Mode::kThreads ? static_cast<int64_t>(threads.plans.size()) : 1; }
  // The mesh rank of the k-th rank run here.
  int64_t mesh_rank(int64_t k) const { return mode == Mode::kMpi ? mpi->rank : k; }
  size_t input_index(const std::string& name) const {
    const Graph& g = boundary.global;
    for (size_t i = 0; i < g.inputs().size(); ++i)
      if (g.value(g.inputs()[i]).name == name) return i;
    TESSERA_THROW(ErrorKind::kUsage, "the plan has no input '" << name << "'");
  }
};

namespace {

// Resolves the pairs on the plan's global interface and checks each
// carried output has its input's type.
void bind_carry(Session::State& st, const std::vector<CarryPair>& plan_carry, const std::vector<std::string>& specs,
                const std::vector<TensorType>& out_types) {
  const detail::Boundary& b = st.boundary;
  std::vector<std::pair<std::string, TensorType>> outs, ins;
  for (size_t k = 0; k < b.out_names.size(); ++k) outs.emplace_back(b.out_names[k], out_types[k]);
  const Graph& g = b.global;
  for (ValueId v : g.inputs()) ins.emplace_back(g.value(v).name, g.type(v));
  std::vector<std::string> all;
  for (const CarryPair& c : plan_carry) all.push_back(c.output + "=" + c.input);
  for (const std::string& s : specs) all.push_back(s);
  std::vector<mutator::CarryPair> pairs = mutator::resolve_carry(outs, ins, all);
  st.carried_from.assign(g.inputs().size(), -1);
  st.carried_out.assign(b.out_names.size(), false);
  for (const mutator::CarryPair& p : pairs) {
    size_t in = st.input_index(p.input), out = 0;
    while (b.out_names[out] != p.output) ++out;
    if (st.carried_from[in] >= 0) continue;  // the plan's pair and a spec naming it again
    st.carried_from[in] = static_cast<int>(out);
    st.carried_out[out] = true;
    if (b.in[in] != b.out[out])
      TESSERA_THROW(ErrorKind::kInvalidGraph, "carried tensor '" << p.output << "' leaves the ranks " << b.out[out].str()
                                                                 << " but input '" << p.input << "' takes "
                                                                 << b.in[in].str()
                                                                 << ": plan it with both ends alike (--carry)");
    st.carry.push_back({p.output, p.input});
  }
  st.state.assign(static_cast<size_t>(st.local_ranks()), std::vector<Tensor>(g.inputs().size()));
  st.has_state.assign(g.inputs().size(), false);
}

std::vector<TensorType> global_output_types(const detail::Boundary& b, const Graph& rank0) {
  std::vector<TensorType> t;
  for (size_t k = 0; k < rank0.outputs().size(); ++k) t.push_back({rank0.type(rank0.outputs()[k]).dtype, b.out_shapes[k]});
  return t;
}

std::shared_ptr<Session::State> mesh_state(const detail::RankSource& source, const SessionOptions& options,
                                           const std::vector<CarryPair>& carry) {
  auto st = std::make_shared<Session::State>();
  st->config = options.run;
  DeviceMesh mesh = DeviceMesh::parse(source.mesh);
  Graph rank0 = source.load(0);
  if (launched_by_mpi()) {
    st->mode = Session::State::Mode::kMpi;
    st->mpi = detail::compile_mpi_rank(source, mesh, options.run);
    st->boundary = st->mpi->boundary;
  } else {
    st->mode = Session::State::Mode::kThreads;
    st->threads.mesh = mesh;
    st->threads.config = options.run;
    detail::compile_threads(st->threads, source);
    st->boundary = st->threads.boundary;
  }
  bind_carry(*st, carry, options.carry, global_output_types(st->boundary, rank0));
  return st;
}

std::shared_ptr<Session::State> one_state(const Graph& g, const SessionOptions& options,
                                          const std::vector<CarryPair>& carry) {
  auto st = std::make_shared<Session::State>();
  st->config = options.run;
  st->mode = Session::State::Mode::kOne;
  detail::RankSource source{"", 1, "the model", nullptr, nullptr, {}, {}};
  st->boundary = detail::boundary_of(source, DeviceMesh(), g);
  std::vector<TensorType> out_types;
  for (ValueId v : g.outputs()) out_types.push_back(g.type(v));
  st->one.emplace(runtime::ExecutablePlan::compile(g, detail::run_options(options.run)));
  bind_carry(*st, carry, options.carry, out_types);
  return st;
}

// plan.json's carry in a single-device plan folder (none for a model file).
std::vector<CarryPair> folder_carry(const std::string& path) {
  std::vector<CarryPair> out;
  fs::path json = fs::path(path) / "plan.json";
  std::error_code ec;
  if (!fs::is_directory(path, ec) || !fs::exists(json, ec)) return out;
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_object() && j.contains("carry") && j["carry"].is_array())
    for (const nlohmann::json& c : j["carry"])
      if (c.is_object() && c.value("output", "") != "" && c.value("input", "") != "")
        out.push_back({c["output"].get<std::string>(), c["input"].get<std::string>()});
  return out;
}

}  // namespace

Session::Session(const Plan& plan, const SessionOptions& options)
    : state_(plan.is_mesh() ? mesh_state(detail::memory_source(plan), options, plan.carry)
                            : one_state(plan.model, options, plan.carry)) {}

Session Session::open(const std::string& path, const SessionOptions& options, const LoadOptions& load) {
  if (is_sharded_plan_folder(path)) {
    MeshPlan plan = read_mesh_plan(path);
    return Session(mesh_state(detail::folder_source(plan, load), options, plan.carry));
  }
  return Session(one_state(api::load(path, load), options, folder_carry(path)));
}

namespace {

// Every rank's plan run once as a thread, each on its own inputs, which it
// may write in place where `donated` says.
void run_threads_donating(MeshExecutable::State& st, std::vector<std::vector<Tensor>>& per_rank,
                          const std::vector<bool>& donated, std::vector<std::vector<Tensor>>& outs) {
  std::lock_guard<std::mutex> lock(st.mutex);
  outs.assign(st.plans.size(), {});
  st.world->run([&](int64_t r) {
    auto k = static_cast<size_t>(r);
    outs[k] = st.plans[k]->run(per_rank[k], donated);
  });
}

// One step on every rank run here: its outputs, per rank (blocks), with
// the carried ones kept for the next step.
std::vector<std::vector<Tensor>> run_step(Session::State& st, const std::map<std::string, Tensor>& feeds) {
  using State = Session::State;
  const detail::Boundary& b = st.boundary;
  const Graph& g = b.global;
  std::vector<const Tensor*> fed(g.inputs().size(), nullptr);
  for (const auto& [name, t] : feeds) {
    size_t i = st.input_index(name);
    const TensorType& want = g.type(g.inputs()[i]);
    if (t.type() != want)
      TESSERA_THROW(ErrorKind::kUsage, (st.carried_from[i] >= 0 ? "carried tensor '" : "input '")
                                           << name << "' is " << type_str(t.type()) << ", the plan takes "
                                           << type_str(want));
    fed[i] = &t;
  }
  int64_t n = st.local_ranks();
  std::vector<std::vector<Tensor>> per_rank(static_cast<size_t>(n));
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    if (!fed[i] && st.carried_from[i] < 0)
      TESSERA_THROW(ErrorKind::kUsage, "step " << st.steps << ": input '" << g.value(g.inputs()[i]).name
                                               << "' is not fed (and not carried)");
    for (int64_t k = 0; k < n; ++k) {
      int64_t r = st.mesh_rank(k);
      Tensor& kept = st.state[static_cast<size_t>(k)][i];
      if (fed[i]) {
        per_rank[static_cast<size_t>(k)].push_back(shard_of(*fed[i], b.in[i], b.mesh, r));
      } else if (st.has_state[i]) {
        // Where the last step left it, on this rank; moved, so that the
        // step can write it in place (its storage held once).
        per_rank[static_cast<size_t>(k)].push_back(std::move(kept));
      } else {
        const TensorType& t = g.type(g.inputs()[i]);
        per_rank[static_cast<size_t>(k)].push_back(Tensor(t.dtype, b.in[i].local_shape(b.mesh, t.shape, r)));
      }
    }
  }
  std::vector<bool> donated(g.inputs().size());
  for (size_t i = 0; i < donated.size(); ++i) donated[i] = st.carried_from[i] >= 0;
  std::vector<std::vector<Tensor>> outs;
  try {
    switch (st.mode) {
      case State::Mode::kOne:
        outs.push_back(st.one->run(per_rank[0], donated));
        break;
      case State::Mode::kThreads:
        run_threads_donating(st.threads, per_rank, donated, outs);
        break;
      case State::Mode::kMpi:
        try {
          outs.push_back(st.mpi->plan->run(per_rank[0], donated));
        } catch (const std::exception& e) {
          detail::fail_job(st.mpi->rank, e.what());  // its peers wait in a collective
        }
        break;
    }
  } catch (...) {
    // The carried blocks go back to the session. A step that failed may
    // have written some of them in place already (a later kernel failing
    // after a layer's cache write): the state is then a partial step's. A
    // scatter with a bad index fails before it writes anything.
    for (size_t i = 0; i < g.inputs().size(); ++i)
      if (!fed[i] && st.has_state[i])
        for (int64_t k = 0; k < n; ++k)
          st.state[static_cast<size_t>(k)][i] = std::move(per_rank[static_cast<size_t>(k)][i]);
    throw;
  }
  ++st.steps;
  for (size_t i = 0; i < g.inputs().size(); ++i)
    if (st.carried_from[i] >= 0) {
      for (int64_t k = 0; k < n; ++k)
        st.state[static_cast<size_t>(k)][i] = outs[static_cast<size_t>(k)][static_cast<size_t>(st.carried_from[i])];
      st.has_state[i] = true;
    }
  return outs;
}

// The largest value of a block's last row and its column (the lowest
// among equal maxima), as one device's argmax picks.
std::pair<double, int64_t> last_row_argmax(const Tensor& t) {
  if (t.shape().empty() || t.numel() == 0)
    TESSERA_THROW(ErrorKind::kUsage, "an output of type " << type_str(t.type()) << " has no last dim to pick from");
  int64_t n = t.shape().back(), base = t.numel() - n, best = 0;
  double top = t.get_double(base);
  for (int64_t i = 1; i < n; ++i)
    if (double v = t.get_double(base + i); v > top) {
      top = v;
      best = i;
    }
  return {top, best};
}

// (max, index) pairs combined: the larger value, the lower index on ties.
bool better_pair(const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

std::map<std::string, Tensor> Session::step(const std::map<std::string, Tensor>& feeds) {
  State& st = *state_;
  const detail::Boundary& b = st.boundary;
  std::vector<std::vector<Tensor>> outs = run_step(st, feeds);
  std::map<std::string, Tensor> result;
  for (size_t o = 0; o < b.out_names.size(); ++o) {
    if (st.carried_out[o]) continue;
    if (!b.sharded_output(o)) {
      result[b.out_names[o]] = outs[0][o];
    } else if (st.mode == State::Mode::kMpi) {
      result[b.out_names[o]] = detail::gather_blocks(*st.mpi->mpi, outs[0][o], b.out[o], b.mesh, b.out_shapes[o]);
    } else {
      std::vector<Tensor> blocks;
      for (const std::vector<Tensor>& r : outs) blocks.push_back(r[o]);
      result[b.out_names[o]] = unshard(blocks, b.out[o], b.mesh, b.out_shapes[o]);
    }
  }
  return result;
}

int64_t Session::step_argmax(const std::map<std::string, Tensor>& feeds, const std::string& output) {
  State& st = *state_;
  const detail::Boundary& b = st.boundary;
  size_t o = 0;
  while (o < b.out_names.size() && b.out_names[o] != output) ++o;
  if (o == b.out_names.size() || st.carried_out[o])
    TESSERA_THROW(ErrorKind::kUsage, "the plan has no output '" << output << "' that is not carried");
  std::vector<std::vector<Tensor>> outs = run_step(st, feeds);
  const Sharding& s = b.out[o];
  const size_t last = b.out_shapes[o].size() - 1;
  bool only_last = true;  // split on the last dim alone: each rank's block holds its columns of every row
  for (const Placement& p : s.placements) only_last = only_last && (!p.is_shard() || static_cast<size_t>(p.dim) == last);
  if (!b.sharded_output(o) || !only_last) {
    Tensor whole = outs[0][o];
    if (b.sharded_output(o)) {
      if (st.mode == State::Mode::kMpi) {
        whole = detail::gather_blocks(*st.mpi->mpi, outs[0][o], s, b.mesh, b.out_shapes[o]);
      } else {
        std::vector<Tensor> blocks;
        for (const std::vector<Tensor>& r : outs) blocks.push_back(r[o]);
        whole = unshard(blocks, s, b.mesh, b.out_shapes[o]);
      }
    }
    return last_row_argmax(whole).second;
  }
  // Vocab-parallel: each rank's (max, index) over its columns, the global
  // index from its block's offset; the pairs combined, never the logits.
  struct Pair {
    double value;
    int64_t index;
  };
  auto mine = [&](int64_t k) {
    auto [v, i] = last_row_argmax(outs[static_cast<size_t>(k)][o]);
    std::vector<int64_t> offset;
    Shape size;
    local_block(b.mesh, s, b.out_shapes[o], st.mesh_rank(k), offset, size);
    return Pair{v, offset[last] + i};
  };
  std::vector<Pair> pairs;
  if (st.mode == State::Mode::kMpi) {
    Pair p = mine(0);
    const auto* raw = reinterpret_cast<const uint8_t*>(&p);
    Tensor one = Tensor::from_bytes(DType::kU8, {static_cast<int64_t>(sizeof p)}, std::vector<uint8_t>(raw, raw + sizeof p));
    Tensor all = detail::gather_pairs(*st.mpi->mpi, one, b.mesh);  // 16 bytes a rank, in rank order
    pairs.resize(static_cast<size_t>(b.mesh.num_devices()));
    std::memcpy(pairs.data(), all.data(), pairs.size() * sizeof p);
  } else {
    for (int64_t k = 0; k < st.local_ranks(); ++k) pairs.push_back(mine(k));
  }
  Pair best = pairs[0];
  for (const Pair& p : pairs)
    if (better_pair({p.value, p.index}, {best.value, best.index})) best = p;
  return best.index;
}

std::vector<std::string> Session::output_names() const {
  std::vector<std::string> names;
  for (size_t o = 0; o < state_->boundary.out_names.size(); ++o)
    if (!state_->carried_out[o]) names.push_back(state_->boundary.out_names[o]);
  return names;
}

std::vector<Tensor> Session::state_blocks(const std::string& input) const {
  const State& st = *state_;
  size_t i = st.input_index(input);
  if (st.carried_from[i] < 0) TESSERA_THROW(ErrorKind::kUsage, "input '" << input << "' is not carried");
  std::vector<Tensor> blocks;
  const TensorType& t = st.boundary.global.type(st.boundary.global.inputs()[i]);
  for (size_t k = 0; k < st.state.size(); ++k) {
    const std::vector<Tensor>& r = st.state[k];
    blocks.push_back(st.has_state[i] ? r[i]
                                     : Tensor(t.dtype, st.boundary.in[i].local_shape(st.boundary.mesh, t.shape,
                                                                                     st.mesh_rank(static_cast<int64_t>(k)))));
  }
  return blocks;
}

Tensor Session::state(const std::string& input) const {
  const State& st = *state_;
  const detail::Boundary& b = st.boundary;
  size_t i = st.input_index(input);
  std::vector<Tensor> blocks = state_blocks(input);
  const TensorType& t = b.global.type(b.global.inputs()[i]);
  if (st.mode == State::Mode::kMpi) return detail::gather_blocks(*st.mpi->mpi, blocks[0], b.in[i], b.mesh, t.shape);
  if (st.mode == State::Mode::kOne) return blocks[0];
  return unshard(blocks, b.in[i], b.mesh, t.shape);
}

const std::vector<CarryPair>& Session::carried() const { return state_->carry; }

std::vector<std::string> Session::input_names() const {
  std::vector<std::string> names;
  const Graph& g = state_->boundary.global;
  for (ValueId v : g.inputs()) names.push_back(g.value(v).name);
  return names;
}

int64_t Session::steps() const { return state_->steps; }
bool Session::mpi() const { return state_->mode == State::Mode::kMpi; }
int64_t Session::rank() const { return mpi() ? state_->mpi->rank : 0; }
int64_t Session::ranks() const { return state_->boundary.mesh.num_devices(); }
std::string Session::profile_table() const {
  const State& st = *state_;
  if (!st.config.profile) return "";
  switch (st.mode) {
    case State::Mode::kOne: return st.one->profile().table();
    case State::Mode::kThreads: return st.threads.plans[0]->profile().table();
    case State::Mode::kMpi: return st.mpi->plan->profile().table();
  }
  return "";
}

int Session::threads_per_rank() const {
  switch (state_->mode) {
    case State::Mode::kOne: {
      int t = state_->one->options().threads;  // 0: one per core
      return t > 0 ? t : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    case State::Mode::kThreads: return state_->threads.options.threads;
    case State::Mode::kMpi: return state_->mpi->options.threads;
  }
  return 0;
}

}  // namespace tessera::api
