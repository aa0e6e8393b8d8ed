// Graphs and lookups the kernel model's tests share
// (kernel_model_test.cc, kernel_model_products_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cost/device_profile.h"
#include "graph/graph.h"

namespace tessera::cost::test {

// A MatMul [m, k] x [k, n] over two inputs.
inline Graph matmul(int64_t m, int64_t k, int64_t n, DType t = DType::kF32) {
  Graph g;
  ValueId a = g.add_input("a", {t, {m, k}});
  ValueId b = g.add_input("b", {t, {k, n}});
  g.set_outputs({g.add(OpKind::kMatMul, {a, b}, {}, "mm")});
  return g;
}

// A binary element-wise `kind` over two f32 inputs of n elements.
inline Graph binary(OpKind kind, int64_t n) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {n}});
  ValueId b = g.add_input("b", {DType::kF32, {n}});
  g.set_outputs({g.add(kind, {a, b}, {}, "op")});
  return g;
}

// The index of memory level `name` in `d` (a test failure where it has none).
inline size_t level(const DeviceProfile& d, const std::string& name) {
  for (size_t i = 0; i < d.memory.size(); ++i)
    if (d.memory[i].name == name) return i;
  ADD_FAILURE() << "no level " << name;
  return 0;
}

}  // namespace tessera::cost::test
