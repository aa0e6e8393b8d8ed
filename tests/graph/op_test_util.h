// Helpers the op-family tests share: one-node graphs evaluated in double,
// value checks, and the message of a shape-inference error.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "graph/interpreter.h"

namespace tessera::test {

inline TensorType f32(Shape s) { return {DType::kF32, std::move(s)}; }
inline Tensor f32(Shape s, std::vector<double> v) { return Tensor::from_doubles(DType::kF32, std::move(s), v); }
inline Tensor i64(Shape s, std::vector<int64_t> v) { return Tensor::from_ints(DType::kI64, std::move(s), v); }

// Builds a one-node graph over fresh inputs, evaluates it in double and
// returns all of the node's outputs.
inline std::vector<Tensor> run_all(OpKind kind, const std::vector<Tensor>& ins, Attrs attrs = {}) {
  Graph g;
  std::vector<ValueId> vs;
  for (size_t i = 0; i < ins.size(); ++i) vs.push_back(g.add_input("in" + std::to_string(i), ins[i].type()));
  NodeId n = g.add_node(kind, vs, std::move(attrs));
  g.set_outputs(g.node(n).outputs);
  return evaluate(g, ins, Precision::kF64);
}

inline Tensor run(OpKind kind, const std::vector<Tensor>& ins, Attrs attrs = {}) {
  return run_all(kind, ins, std::move(attrs))[0];
}

inline void expect_values(const Tensor& t, DType dtype, const Shape& shape, const std::vector<double>& want,
                          double tol = 1e-6) {
  ASSERT_EQ(t.dtype(), dtype);
  ASSERT_EQ(t.shape(), shape);
  std::vector<double> got = t.to_doubles();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
    else EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
  }
}

inline void expect_ints(const Tensor& t, DType dtype, const Shape& shape, const std::vector<int64_t>& want) {
  ASSERT_EQ(t.dtype(), dtype);
  ASSERT_EQ(t.shape(), shape);
  EXPECT_EQ(t.to_ints(), want);
}

// The message of the Error that adding the node throws ("" if none).
inline std::string add_error(OpKind kind, const std::vector<TensorType>& ins, Attrs attrs = {}) {
  Graph g;
  std::vector<ValueId> vs;
  for (size_t i = 0; i < ins.size(); ++i) vs.push_back(g.add_input("in" + std::to_string(i), ins[i]));
  try {
    g.add(kind, vs, std::move(attrs), "n");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
    return e.what();
  }
  return "";
}

// The error thrown by `f`, or a failure if none is.
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an Error";
  return Error(ErrorKind::kInternal, "no error");
}

// Shape inference of a one-node graph must fail with a message containing `msg`.
inline void expect_infer_error(OpKind kind, const std::vector<TensorType>& inputs, Attrs attrs, const std::string& msg) {
  Graph g;
  std::vector<ValueId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) ids.push_back(g.add_input("in" + std::to_string(i), inputs[i]));
  try {
    g.add(kind, ids, std::move(attrs));
    FAIL() << "expected an error containing: " << msg;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
    EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << "message was: " << e.what();
  }
}

inline Attrs make_attrs(std::initializer_list<std::pair<std::string, AttrValue>> list) {
  Attrs a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

// A 3x3 convolution, stride 1.
inline Attrs conv3x3(int64_t pad = 1, int64_t dilation = 1) {
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  a.set("dilations", std::vector<int64_t>{dilation, dilation});
  return a;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace tessera::test
