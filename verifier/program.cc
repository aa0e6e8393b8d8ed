#include "verifier/program.h"

#include "graph/error.h"
#include "graph/zp.h"

namespace tessera::verifier {
namespace {

// Where a rank's block sits in the global tensor: per dim, the offset of the
// block (dims sharded over several axes nest in mesh-axis order).
std::vector<int64_t> block_offset(const DeviceMesh& mesh, const Sharding& s, const Shape& global,
                                  const std::vector<int64_t>& coords) {
  std::vector<int64_t> offset(global.size(), 0), size = global;
  for (size_t a = 0; a < s.placements.size(); ++a) {
    const Placement& p = s.placements[a];
    if (!p.is_shard()) continue;
    int64_t n = mesh.axes()[a].size;
    size[p.dim] /= p.blocks(n);
    offset[p.dim] += p.block_of(coords[a], n) * size[p.dim];
  }
  return offset;
}

template <class V>
void copy_box(const V& src, const Shape& src_shape, const std::vector<int64_t>& src_off, V& dst,
              const Shape& dst_shape, const std::vector<int64_t>& dst_off, const Shape& extent, bool add) {
  int64_t n = shape_numel(extent);
  std::vector<int64_t> ss = shape_strides(src_shape), ds = shape_strides(dst_shape), idx(extent.size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, si = 0, di = 0;
    for (int64_t d = static_cast<int64_t>(extent.size()) - 1; d >= 0; --d) {
      idx[d] = rem % extent[d];
      rem /= extent[d];
      si += (idx[d] + src_off[d]) * ss[d];
      di += (idx[d] + dst_off[d]) * ds[d];
    }
    if (add) dst[di] = dst[di] + src[si];
    else dst[di] = src[si];
  }
}

template <class T>
void alloc(RefTensor<T>& t) {
  if (t.is_num()) t.num.assign(static_cast<size_t>(t.numel()), T{});
  else t.ints.assign(static_cast<size_t>(t.numel()), 0);
}

}  // namespace

TensorType global_type(const DeviceMesh& mesh, const Sharding& sharding, const TensorType& local) {
  if (sharding.placements.size() != mesh.axes().size())
    TESSERA_THROW(ErrorKind::kInvalidGraph, "sharding " << sharding.str() << " does not fit mesh " << mesh.str());
  TensorType t = local;
  for (size_t a = 0; a < sharding.placements.size(); ++a) {
    const Placement& p = sharding.placements[a];
    if (!p.is_shard()) continue;
    if (p.dim < 0 || p.dim >= t.rank())
      TESSERA_THROW(ErrorKind::kInvalidGraph, "sharding " << sharding.str() << " names dim " << p.dim << " of "
                                                          << type_str(local));
    t.shape[p.dim] *= p.blocks(mesh.axes()[a].size);
  }
  sharding.validate(mesh, t);
  return t;
}

Program::Program(const Graph& g) : graph_(&g) { init_types(); }

Program::Program(const ShardedProgram& p) : sharded_(&p) {
  if (!p.per_rank.empty() && static_cast<int64_t>(p.per_rank.size()) != p.mesh.num_devices())
    TESSERA_THROW(ErrorKind::kUsage, "a sharded program on " << p.mesh.str() << " needs " << p.mesh.num_devices()
                                                             << " rank programs, got " << p.per_rank.size());
  const Graph& g = graph();
  if (p.input_shardings.size() != g.inputs().size() || p.output_shardings.size() != g.outputs().size())
    TESSERA_THROW(ErrorKind::kUsage, "a sharded program needs one sharding per input and per output");
  init_types();
}

void Program::init_types() {
  const Graph& g = graph();
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const TensorType& t = g.type(g.inputs()[i]);
    input_types_.push_back(sharded_ ? global_type(sharded_->mesh, sharded_->input_shardings[i], t) : t);
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const TensorType& t = g.type(g.outputs()[i]);
    output_types_.push_back(sharded_ ? global_type(sharded_->mesh, sharded_->output_shardings[i], t) : t);
  }
}

template <class T>
std::vector<GlobalOutputs<T>> Program::run_sets(const std::vector<std::vector<RefTensor<T>>>& sets,
                                                const StepFn& steps) const {
  std::vector<GlobalOutputs<T>> outs(sets.size());
  if (!sharded_) {
    std::vector<std::vector<RefTensor<T>>> values = interpret_sets<T>(*graph_, sets, steps);
    for (size_t s = 0; s < sets.size(); ++s) {
      outs[s].values = std::move(values[s]);
      for (const RefTensor<T>& v : outs[s].values) outs[s].replica_mismatch.emplace_back(static_cast<size_t>(v.numel()), 0);
    }
    return outs;
  }
  const ShardedProgram& sp = *sharded_;
  const Graph& g = graph();
  int64_t ranks = sp.mesh.num_devices();
  // Scatter: each rank gets its block; a Partial input lives on coordinate 0.
  std::vector<std::vector<RefTensor<T>>> local_inputs(sets.size() * static_cast<size_t>(ranks));
  for (size_t set = 0; set < sets.size(); ++set) {
    const std::vector<RefTensor<T>>& global_inputs = sets[set];
    for (int64_t r = 0; r < ranks; ++r) {
      std::vector<int64_t> c = sp.mesh.coords(r);
      for (size_t i = 0; i < global_inputs.size(); ++i) {
        const Sharding& s = sp.input_shardings[i];
        RefTensor<T> t;
        t.type = g.type(g.inputs()[i]);
        alloc(t);
        bool zero = false;
        for (size_t a = 0; a < s.placements.size(); ++a)
          if (s.placements[a].kind == Placement::Kind::kPartial && c[a] != 0) zero = true;
        if (!zero) {
          std::vector<int64_t> off = block_offset(sp.mesh, s, global_inputs[i].type.shape, c);
          std::vector<int64_t> zero_off(off.size(), 0);
          if (t.is_num())
            copy_box(global_inputs[i].num, global_inputs[i].type.shape, off, t.num, t.type.shape, zero_off, t.type.shape, false);
          else
            copy_box(global_inputs[i].ints, global_inputs[i].type.shape, off, t.ints, t.type.shape, zero_off, t.type.shape, false);
        }
        local_inputs[set * static_cast<size_t>(ranks) + static_cast<size_t>(r)].push_back(std::move(t));
      }
    }
  }
  std::vector<const Graph*> programs;
  for (int64_t r = 0; r < ranks; ++r)
    programs.push_back(sp.per_rank.empty() ? &sp.local : &sp.per_rank[static_cast<size_t>(r)]);
  std::vector<std::vector<RefTensor<T>>> all_outputs = interpret_ranks_sets<T>(programs, sp.mesh, std::move(local_inputs), steps);
  for (size_t set = 0; set < sets.size(); ++set) {
    GlobalOutputs<T>& out = outs[set];
    auto local_outputs = [&](int64_t r) -> const std::vector<RefTensor<T>>& {
      return all_outputs[set * static_cast<size_t>(ranks) + static_cast<size_t>(r)];
    };
    // Gather: Shard axes place blocks, Partial axes sum, Replicate axes read
    // coordinate 0 and must agree with the other coordinates; a shard in
    // groups reads the first rank of each group, and the group's other ranks
    // must agree with it.
    for (size_t j = 0; j < output_types_.size(); ++j) {
      const Sharding& s = sp.output_shardings[j];
      RefTensor<T> global;
      global.type = output_types_[j];
      alloc(global);
      std::vector<uint8_t> mismatch(static_cast<size_t>(global.numel()), 0);
      for (int64_t r = 0; r < ranks; ++r) {
        std::vector<int64_t> c = sp.mesh.coords(r), c0 = c;
        bool replica = false;
        for (size_t a = 0; a < s.placements.size(); ++a) {
          const Placement& p = s.placements[a];
          int64_t group = p.is_shard() ? sp.mesh.axes()[a].size / p.blocks(sp.mesh.axes()[a].size) : 1;
          if (p.kind == Placement::Kind::kReplicate && c[a] != 0) {
            c0[a] = 0;
            replica = true;
          } else if (p.is_grouped() && c[a] % group != 0) {
            c0[a] = c[a] - c[a] % group;
            replica = true;
          }
        }
        const RefTensor<T>& mine = local_outputs(r)[j];
        std::vector<int64_t> off = block_offset(sp.mesh, s, global.type.shape, c);
        std::vector<int64_t> zero_off(off.size(), 0);
        if (!replica) {
          if (global.is_num()) copy_box(mine.num, mine.type.shape, zero_off, global.num, global.type.shape, off, mine.type.shape, true);
          else copy_box(mine.ints, mine.type.shape, zero_off, global.ints, global.type.shape, off, mine.type.shape, true);
          continue;
        }
        const RefTensor<T>& ref = local_outputs(sp.mesh.rank_of(c0))[j];
        std::vector<uint8_t> local_diff(static_cast<size_t>(mine.numel()), 0);
        bool any = false;
        for (size_t k = 0; k < local_diff.size(); ++k) {
          bool differs = mine.is_num() ? !(mine.num[k] == ref.num[k]) : mine.ints[k] != ref.ints[k];
          local_diff[k] = differs;
          any |= differs;
        }
        if (any) copy_box(local_diff, mine.type.shape, zero_off, mismatch, global.type.shape, off, mine.type.shape, true);
      }
      out.values.push_back(std::move(global));
      out.replica_mismatch.push_back(std::move(mismatch));
    }
  }
  return outs;
}

template <class T>
GlobalOutputs<T> Program::run(const std::vector<RefTensor<T>>& global_inputs) const {
  return std::move(run_sets<T>({global_inputs}).at(0));
}

template GlobalOutputs<float> Program::run<float>(const std::vector<RefTensor<float>>&) const;
template std::vector<GlobalOutputs<float>> Program::run_sets<float>(const std::vector<std::vector<RefTensor<float>>>&,
                                                                   const StepFn&) const;
template std::vector<GlobalOutputs<double>> Program::run_sets<double>(const std::vector<std::vector<RefTensor<double>>>&,
                                                                   const StepFn&) const;
template std::vector<GlobalOutputs<Zp>> Program::run_sets<Zp>(const std::vector<std::vector<RefTensor<Zp>>>&,
                                                                   const StepFn&) const;
template GlobalOutputs<double> Program::run<double>(const std::vector<RefTensor<double>>&) const;
template GlobalOutputs<Zp> Program::run<Zp>(const std::vector<RefTensor<Zp>>&) const;

}  // namespace tessera::verifier
