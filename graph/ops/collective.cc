// Collective ops over a device mesh. In a per-rank program each is an ordinary
// op whose reference semantics read the same input on every rank of its group
// (the ranks that differ only along `mesh_axis`).
//
//   AllReduce(x)            = sum over the group of x
//   AllGather(x, axis)      = concat over the group of x along axis
//   ReduceScatter(x, axis)  = this rank's 1/n slice along axis of AllReduce(x)
//   AllToAll(x, split, cat) = split x into n chunks along `split_axis`, send
//                             chunk j to rank j, concat received along `concat_axis`
//   HaloExchange(x, axis)   = concat along axis of the previous rank's last
//                             before[c] rows, x, the next rank's first after[c]
//                             rows, c this rank's coordinate (spatial sharding's
//                             halo: mutator/sharding/spatial.h)
//
// Shape inference needs the group size, which is a property of the mesh, not
// the graph; the node carries it as `group_size`.
#include <algorithm>

#include "graph/attr_views.h"
#include "graph/interpreter.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {
namespace {

using ops::normalize_axis;

std::vector<TensorType> infer_all_reduce(const InferContext& c) { return {c.inputs[0]}; }

std::vector<TensorType> infer_all_gather(const InferContext& c) {
  TensorType t = c.inputs[0];
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), t.rank());
  t.shape[axis] *= c.node.attrs.i("group_size");
  return {t};
}

std::vector<TensorType> infer_reduce_scatter(const InferContext& c) {
  TensorType t = c.inputs[0];
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), t.rank());
  int64_t n = c.node.attrs.i("group_size");
  if (t.shape[axis] % n != 0)
    TESSERA_SHAPE_ERROR("dim " << axis << " of " << type_str(t) << " is not divisible by group size " << n);
  t.shape[axis] /= n;
  return {t};
}

std::vector<TensorType> infer_all_to_all(const InferContext& c) {
  TensorType t = c.inputs[0];
  int64_t split = normalize_axis(c.node.attrs.i("split_axis"), t.rank());
  int64_t cat = normalize_axis(c.node.attrs.i("concat_axis"), t.rank());
  int64_t n = c.node.attrs.i("group_size");
  if (t.shape[split] % n != 0)
    TESSERA_SHAPE_ERROR("dim " << split << " of " << type_str(t) << " is not divisible by group size " << n);
  t.shape[split] /= n;
  t.shape[cat] *= n;
  return {t};
}

// HaloExchange: `before` and `after` list every coordinate's halo rows (the
// same attributes on every rank of the group), `coordinate` is this rank's.
std::vector<TensorType> infer_halo_exchange(const InferContext& c) {
  TensorType t = c.inputs[0];
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), t.rank());
  int64_t n = c.node.attrs.i("group_size"), me = c.node.attrs.i("coordinate");
  const auto &before = c.node.attrs.ints("before"), &after = c.node.attrs.ints("after");
  if (static_cast<int64_t>(before.size()) != n || static_cast<int64_t>(after.size()) != n || me < 0 || me >= n)
    TESSERA_SHAPE_ERROR("before and after list one halo per rank of the group (" << n << ") and coordinate "
                                                                                 << me << " is one of them");
  if (before[0] != 0 || after[static_cast<size_t>(n - 1)] != 0)
    TESSERA_SHAPE_ERROR("the first rank has no rows before it and the last none after it");
  for (int64_t r = 0; r < n; ++r)
    if (before[static_cast<size_t>(r)] < 0 || after[static_cast<size_t>(r)] < 0)
      TESSERA_SHAPE_ERROR("a halo of negative rows");
  int64_t mine = t.shape[axis];
  if ((me + 1 < n && before[static_cast<size_t>(me + 1)] > mine) || (me > 0 && after[static_cast<size_t>(me - 1)] > mine))
    TESSERA_SHAPE_ERROR("a neighbour's halo is deeper than this rank's " << mine << " rows along dim " << axis);
  t.shape[axis] += before[static_cast<size_t>(me)] + after[static_cast<size_t>(me)];
  return {t};
}

template <class T>
struct Group {
  std::vector<const RefTensor<T>*> members;  // ordered by coordinate on the axis
  int64_t my_index = 0;
};

template <class T>
Group<T> group_of(const EvalArgs<T>& a) {
  TESSERA_CHECK(a.mesh != nullptr, "collective evaluated without a mesh");
  const DeviceMesh& mesh = *a.mesh->mesh;
  int axis = mesh.axis_index(a.node.attrs.s("mesh_axis"));
  Group<T> g;
  std::vector<int64_t> ranks = mesh.group(a.mesh->rank, axis);
  if (static_cast<int64_t>(ranks.size()) != a.node.attrs.i("group_size"))
    TESSERA_THROW(ErrorKind::kInvalidGraph, "group_size " << a.node.attrs.i("group_size") << " does not match mesh axis '"
                                                          << a.node.attrs.s("mesh_axis") << "' of size " << ranks.size());
  for (size_t k = 0; k < ranks.size(); ++k) {
    g.members.push_back(static_cast<const RefTensor<T>*>(a.mesh->peer_inputs[ranks[k]]));
    if (ranks[k] == a.mesh->rank) g.my_index = static_cast<int64_t>(k);
  }
  return g;
}

// Element access that works for both number and integer tensors.
template <class T, class F>
void for_storage(RefTensor<T>& out, F&& f) {
  if (out.is_num()) f(out.num, [](const RefTensor<T>& t) -> const std::vector<T>& { return t.num; });
  else f(out.ints, [](const RefTensor<T>& t) -> const std::vector<int64_t>& { return t.ints; });
}

template <class T>
RefTensor<T> sum_of(const Group<T>& g) {
  RefTensor<T> s = *g.members[0];
  for (size_t k = 1; k < g.members.size(); ++k) {
    if (s.is_num())
      for (size_t i = 0; i < s.num.size(); ++i) s.num[i] = s.num[i] + g.members[k]->num[i];
    else
      for (size_t i = 0; i < s.ints.size(); ++i) s.ints[i] += g.members[k]->ints[i];
  }
  return s;
}

// Copies block `k` of `n` along `axis` between tensors: to=true writes src into
// that block of dst, to=false reads that block of src into dst.
template <class V>
void copy_block(const V& src, const Shape& src_shape, V& dst, const Shape& dst_shape, int64_t axis, int64_t k,
                bool into_dst_block) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= src_shape[d];
  for (size_t d = axis + 1; d < src_shape.size(); ++d) inner *= src_shape[d];
  int64_t small = into_dst_block ? src_shape[axis] : dst_shape[axis];
  int64_t big = into_dst_block ? dst_shape[axis] : src_shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < small; ++a)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t small_idx = (o * small + a) * inner + i;
        int64_t big_idx = (o * big + k * small + a) * inner + i;
        if (into_dst_block) dst[big_idx] = src[small_idx];
        else dst[small_idx] = src[big_idx];
      }
}

template <class T>
void eval_all_reduce(const EvalArgs<T>& a) {
  (*a.outputs)[0] = sum_of(group_of(a));
  (*a.outputs)[0].type = a.inputs[0]->type;
}

template <class T>
void eval_all_gather(const EvalArgs<T>& a) {
  Group<T> g = group_of(a);
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), out.type.rank());
  for_storage(out, [&](auto& dst, auto get) {
    for (size_t k = 0; k < g.members.size(); ++k)
      copy_block(get(*g.members[k]), g.members[k]->type.shape, dst, out.type.shape, axis, static_cast<int64_t>(k), true);
  });
}

template <class T>
void eval_reduce_scatter(const EvalArgs<T>& a) {
  Group<T> g = group_of(a);
  RefTensor<T> total = sum_of(g);
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), out.type.rank());
  for_storage(out, [&](auto& dst, auto get) {
    copy_block(get(total), total.type.shape, dst, out.type.shape, axis, g.my_index, false);
  });
}

template <class T>
void eval_all_to_all(const EvalArgs<T>& a) {
  Group<T> g = group_of(a);
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  int64_t rank = out.type.rank();
  int64_t split = normalize_axis(a.node.attrs.i("split_axis"), rank);
  int64_t cat = normalize_axis(a.node.attrs.i("concat_axis"), rank);
  int64_t n = static_cast<int64_t>(g.members.size());
  for (int64_t k = 0; k < n; ++k) {
    // Chunk my_index of member k's input, placed as block k along `cat`.
    const RefTensor<T>& src = *g.members[k];
    RefTensor<T> chunk;
    chunk.type = src.type;
    chunk.type.shape[split] /= n;
    ops::alloc(chunk);
    for_storage(chunk, [&](auto& dst, auto get) {
      copy_block(get(src), src.type.shape, dst, chunk.type.shape, split, g.my_index, false);
    });
    for_storage(out, [&](auto& dst, auto get) {
      copy_block(get(chunk), chunk.type.shape, dst, out.type.shape, cat, k, true);
    });
  }
}

// Copies rows [from, from + count) along `axis` of src into dst at row `to`.
template <class V>
void copy_rows(const V& src, const Shape& src_shape, V& dst, const Shape& dst_shape, int64_t axis, int64_t from,
               int64_t count, int64_t to) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= src_shape[d];
  for (size_t d = axis + 1; d < src_shape.size(); ++d) inner *= src_shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < count; ++a)
      for (int64_t i = 0; i < inner; ++i)
        dst[(o * dst_shape[axis] + to + a) * inner + i] = src[(o * src_shape[axis] + from + a) * inner + i];
}

template <class T>
void eval_halo_exchange(const EvalArgs<T>& a) {
  Group<T> g = group_of(a);
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), out.type.rank());
  int64_t me = g.my_index;
  TESSERA_CHECK(me == a.node.attrs.i("coordinate"), "HaloExchange of coordinate " << a.node.attrs.i("coordinate")
                                                                                   << " run by rank " << me);
  int64_t before = a.node.attrs.ints("before")[static_cast<size_t>(me)];
  int64_t after = a.node.attrs.ints("after")[static_cast<size_t>(me)];
  const RefTensor<T>& x = *g.members[static_cast<size_t>(me)];
  for_storage(out, [&](auto& dst, auto get) {
    if (before > 0) {
      const RefTensor<T>& prev = *g.members[static_cast<size_t>(me - 1)];
      copy_rows(get(prev), prev.type.shape, dst, out.type.shape, axis, prev.type.shape[axis] - before, before, 0);
    }
    copy_rows(get(x), x.type.shape, dst, out.type.shape, axis, 0, x.type.shape[axis], before);
    if (after > 0) {
      const RefTensor<T>& next = *g.members[static_cast<size_t>(me + 1)];
      copy_rows(get(next), next.type.shape, dst, out.type.shape, axis, 0, after, before + x.type.shape[axis]);
    }
  });
}

// Each output element reads the same position on every rank of the group
// (AllReduce), or a rank's block along an axis (the others): positional on
// that axis, one-to-one elsewhere.
DimMap collective_dim_map(const DimMapContext& c) {
  const Shape &x = c.in[0], &out = c.out[0];
  std::vector<int64_t> axes;
  for (const char* name : {"axis", "split_axis", "concat_axis"})
    if (c.node.attrs.has(name)) axes.push_back(normalize_axis(c.node.attrs.i(name), static_cast<int64_t>(x.size())));
  DimMap m;
  Piece p;
  Read r{0, {}, false};
  for (size_t d = 0; d < x.size(); ++d) {
    int f = dims::add_factor(m, out[d]);
    bool moved = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    p.dims.push_back(dims::factor(f));
    r.dims.push_back(moved ? dims::positional({f}) : dims::factor(f));
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

}  // namespace

void register_collective_ops(std::vector<OpDef>& defs) {
  auto def = [&](OpKind k) -> OpDef& { return defs[static_cast<int>(k)]; };

  OpDef& ar = def(OpKind::kAllReduce);
  ar.attrs = AllReduceAttrs::schema();
  ar.input_arithmetic = {1, 0};  // the sum
  ar.infer = infer_all_reduce;
  TESSERA_SET_KERNELS(ar, eval_all_reduce);
  ar.linearity = ops::linear_in_input0;
  ar.dim_map = collective_dim_map;

  OpDef& ag = def(OpKind::kAllGather);
  ag.attrs = AxisCollectiveAttrs::schema();
  ag.infer = infer_all_gather;
  TESSERA_SET_KERNELS(ag, eval_all_gather);
  ag.linearity = ops::linear_in_input0;
  ag.dim_map = collective_dim_map;

  OpDef& rs = def(OpKind::kReduceScatter);
  rs.attrs = AxisCollectiveAttrs::schema();
  rs.input_arithmetic = {1, 0};
  rs.infer = infer_reduce_scatter;
  TESSERA_SET_KERNELS(rs, eval_reduce_scatter);
  rs.linearity = ops::linear_in_input0;
  rs.dim_map = collective_dim_map;

  OpDef& aa = def(OpKind::kAllToAll);
  aa.attrs = AllToAllAttrs::schema();
  aa.infer = infer_all_to_all;
  TESSERA_SET_KERNELS(aa, eval_all_to_all);
  aa.linearity = ops::linear_in_input0;
  aa.dim_map = collective_dim_map;

  OpDef& halo = def(OpKind::kHaloExchange);
  halo.attrs = HaloExchangeAttrs::schema();
  halo.infer = infer_halo_exchange;
  TESSERA_SET_KERNELS(halo, eval_halo_exchange);
  halo.linearity = ops::linear_in_input0;
  halo.dim_map = collective_dim_map;
}

}  // namespace tessera
