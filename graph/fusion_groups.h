// Post-op fusion groups, the rule the runtime compiles kernels by and the
// cost model costs them by (both use this one definition; graph/ is the only
// library both may depend on). Fusion is a plan-compile step (the graph is
// not rewritten): a kernel that oneDNN can extend with post-ops (convolution,
// matmul, Gemm, binary and element-wise ops) absorbs the chain of
// element-wise ops that follows it when each link's value has no other reader:
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

namespace tessera {

struct PostOp {
  NodeId node;
  ValueId other = kNoValue;  // binary links: the operand that is not the chain
  // A link made of several nodes that together compute one function of the
  // chain (only with match_gelu): all of them in execution order, `node` last.
  std::vector<NodeId> members;
  bool gelu_erf = false;  // x * 0.5 * (1 + erf(x / sqrt(2))), as PyTorch exports Gelu
  bool swish = false;     // x * sigmoid(x), as PyTorch exports SiLU
};

struct FusedGroup {
  NodeId root;
  std::vector<PostOp> post;

  NodeId last() const { return post.empty() ? root : post.back().node; }
  ValueId output(const Graph& g) const { return g.node(last()).outputs[0]; }
  std::string label(const Graph& g) const;  // "Conv+Add+Relu"
  // Every node the kernel computes: the root, then each link's members.
  std::vector<NodeId> nodes() const;
};

// Unary ops that a post-op chain may contain (oneDNN eltwise algorithms).
bool is_eltwise_post_op(const Node& node);
// Binary ops that a post-op chain may contain (oneDNN binary algorithms).
bool is_binary_post_op(OpKind kind);
// Ops whose CPU kernel takes its data input in any layout, so that a
// oneDNN blocked layout a convolution writes flows through them: the
// convolution itself, pooling, batch norm, concat and the post-op kinds.
// The one list the CPU runtime's layout choice (runtime/cpu/cpu_compiler.cc)
// and the cost model's reorders (cost/graph_cost.cc) read.
bool keeps_blocked_layout(OpKind kind);

// Partitions `order` into groups, in execution order; with fuse = false every
// node is its own group. With match_gelu, the five-node erf form of Gelu
// and the two-node form of SiLU after a fusable root each become one link
// (PostOp::gelu_erf, PostOp::swish) of its chain. With concat_norms, a
// channel Concat whose only reader is a BatchNormalization takes it (and
// its Relu) as links: one pass that writes the normalized concatenation,
// the concatenation itself never stored (DenseNet's pre-activation on
// every concatenation; the CPU runtime and the cost model, not CUDA).
std::vector<FusedGroup> form_groups(const Graph& g, const std::vector<NodeId>& order, bool fuse,
                                    bool match_gelu = false, bool concat_norms = false);

// Below these sizes a CPU kernel runs on the calling thread (the runtime's
// Kernel::max_threads; the cost model charges such a kernel one core):
// multiply-adds for convolution and matmul (and, for matmul, the elements
// of B it reads), output elements for the memory-bound rest. These are the
// defaults, for a host whose profile is not known; a host's own line comes
// from its measured fork-join cost and core rate (cost::one_thread_line),
// which the runtime is handed in RunOptions::one_thread_line.
// bert_base's 128x768 activations are under the elements' line, its
// matmuls and resnet18's convolutions over the MACs'. Measured on 2 shared
// cores: gpt2 at 2 threads spent 98 ms per 128x2304 Split waiting for its
// second thread; element-wise ops of this size take 20-40 us on one.
constexpr int64_t kOneThreadMacs = int64_t{1} << 22;
constexpr int64_t kOneThreadElements = int64_t{1} << 17;

struct OneThreadLine {
  int64_t macs = kOneThreadMacs;          // convolution and matmul multiply-adds
  int64_t elements = kOneThreadElements;  // output elements (and a matmul's B)
  bool operator==(const OneThreadLine&) const = default;
};

// Whether the kernel rooted at `root` whose result is `out` runs on one
// thread (under `line`).
bool runs_on_one_thread(const Graph& g, const Node& root, ValueId out, const OneThreadLine& line = {});

// Whether `operand`, added to `product` (a MatMul's or Gemm's result), is a
// per-column bias: f32, one value per column of the product, broadcast over
// every other dim. The runtime passes such an Add, as the first link of a
// product's chain, to the primitive as its bias argument rather than as a
// post-op, and the cost model prices it so.
bool is_column_bias(const Graph& g, ValueId product, ValueId operand);

}  // namespace tessera
