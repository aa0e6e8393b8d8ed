// Small graph builders shared by the verifier tests.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "graph/graph.h"

namespace tessera::verifier::testing {

inline Attrs make_attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

using Ints = std::vector<int64_t>;

inline TensorType f32(Shape s) { return TensorType{DType::kF32, std::move(s)}; }

inline ValueId conv(Graph& g, ValueId x, ValueId w, Ints kernel, Ints pads, Ints dilations = {1, 1},
                    int64_t group = 1) {
  return g.add(OpKind::kConv, {x, w},
               make_attrs({{"kernel_shape", kernel}, {"strides", Ints{1, 1}}, {"pads", pads},
                           {"dilations", dilations}, {"group", group}}));
}

inline ValueId slice(Graph& g, ValueId x, Ints starts, Ints ends, Ints axes, Ints steps = {}) {
  if (steps.empty()) steps.assign(starts.size(), 1);
  return g.add(OpKind::kSlice, {x}, make_attrs({{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}}));
}

inline ValueId concat(Graph& g, std::vector<ValueId> xs, int64_t axis) {
  return g.add(OpKind::kConcat, std::move(xs), make_attrs({{"axis", axis}}));
}

inline ValueId transpose(Graph& g, ValueId x, Ints perm) {
  return g.add(OpKind::kTranspose, {x}, make_attrs({{"perm", perm}}));
}

}  // namespace tessera::verifier::testing
