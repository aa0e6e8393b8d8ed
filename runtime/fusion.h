// Post-op fusion, a plan-compile step (the graph is not rewritten): a kernel
// that oneDNN can extend with post-ops (convolution, matmul, Gemm, binary and
// element-wise ops) absorbs the chain of element-wise ops that follows it
// when each link's value has no other reader:
//
//   Relu(Add(Conv(x, w, b), residual))  ->  one convolution, post-ops [add, relu]
//   Gelu(Add(MatMul(x, w), bias))       ->  one matmul, post-ops [add, gelu]
//
// A group runs at the position of its last node, where every operand of
// every link is ready.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::runtime {

struct PostOp {
  NodeId node;
  ValueId other = kNoValue;  // binary links: the operand that is not the chain
  // A link made of several nodes that together compute one function of the
  // chain (only with match_gelu): all of them in execution order, `node` last.
  std::vector<NodeId> members;
  bool gelu_erf = false;  // x * 0.5 * (1 + erf(x / sqrt(2))), as PyTorch exports Gelu
};

struct FusedGroup {
  NodeId root;
  std::vector<PostOp> post;

  NodeId last() const { return post.empty() ? root : post.back().node; }
  ValueId output(const Graph& g) const { return g.node(last()).outputs[0]; }
  std::string label(const Graph& g) const;  // "Conv+Add+Relu"
};

// Unary ops that a post-op chain may contain (oneDNN eltwise algorithms).
bool is_eltwise_post_op(const Node& node);
// Binary ops that a post-op chain may contain (oneDNN binary algorithms).
bool is_binary_post_op(OpKind kind);

// Partitions `order` into groups, in execution order; with fuse = false every
// node is its own group. With match_gelu, the five-node erf form of Gelu
// after a fusable root becomes one link (PostOp::gelu_erf) of its chain.
std::vector<FusedGroup> form_groups(const Graph& g, const std::vector<NodeId>& order, bool fuse,
                                    bool match_gelu = false);

}  // namespace tessera::runtime
