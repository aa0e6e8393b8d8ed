// Time per candidate check on subprograms shaped like the model suite's: one
// BERT attention block (fused vs separate QKV projections), one ResNet basic
// block (explicit Pad vs conv padding), and a linear ResNet conv with the
// batch-along-H mutant (partially equivalent: returns the seam boxes).
// Prints the median of the check time next to one float evaluation of the
// original, so the ratio is measured side by side in one run.
//
//   bench_verifier [repetitions=5] [--full]   (--full: also time the forced
//   whole-output evaluation, the path used before box sampling, side by side)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/interpreter.h"
#include "verifier/multilinear.h"

using namespace tessera;
using namespace tessera::verifier;
using Ints = std::vector<int64_t>;

namespace {

Attrs attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}
TensorType f32(Shape s) { return TensorType{DType::kF32, std::move(s)}; }

// BERT-base-like attention at sequence 128, hidden 256, 4 heads.
Graph attention(bool fused_qkv) {
  const int64_t S = 128, D = 256, H = 4, dh = D / H;
  Graph g;
  ValueId x = g.add_input("x", f32({S, D}));
  ValueId wq = g.add_input("wq", f32({D, D})), wk = g.add_input("wk", f32({D, D})), wv = g.add_input("wv", f32({D, D}));
  ValueId wo = g.add_input("wo", f32({D, D}));
  ValueId q, k, v;
  if (fused_qkv) {
    ValueId w = g.add(OpKind::kConcat, {wq, wk, wv}, attrs({{"axis", int64_t{1}}}));
    NodeId s = g.add_node(OpKind::kSplit, {g.add(OpKind::kMatMul, {x, w})},
                          attrs({{"axis", int64_t{1}}, {"split", Ints{D, D, D}}}));
    q = g.node(s).outputs[0], k = g.node(s).outputs[1], v = g.node(s).outputs[2];
  } else {
    q = g.add(OpKind::kMatMul, {x, wq}), k = g.add(OpKind::kMatMul, {x, wk}), v = g.add(OpKind::kMatMul, {x, wv});
  }
  auto heads = [&](ValueId t, Ints perm) {
    ValueId r = g.add(OpKind::kReshape, {t}, attrs({{"shape", Ints{S, H, dh}}}));
    return g.add(OpKind::kTranspose, {r}, attrs({{"perm", perm}}));
  };
  ValueId scores = g.add(OpKind::kMatMul, {heads(q, {1, 0, 2}), heads(k, {1, 2, 0})});
  ValueId scaled = g.add(OpKind::kMul, {scores, g.add_constant("scale", Tensor::scalar_f32(0.125f))});
  ValueId p = g.add(OpKind::kSoftmax, {scaled}, attrs({{"axis", int64_t{-1}}}));
  ValueId ctx = g.add(OpKind::kMatMul, {p, heads(v, {1, 0, 2})});
  ValueId merged = g.add(OpKind::kReshape, {g.add(OpKind::kTranspose, {ctx}, attrs({{"perm", Ints{1, 0, 2}}}))},
                         attrs({{"shape", Ints{S, D}}}));
  g.set_outputs({g.add(OpKind::kMatMul, {merged, wo})});
  return g;
}

ValueId conv(Graph& g, ValueId x, ValueId w, Ints pads) {
  return g.add(OpKind::kConv, {x, w},
               attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", pads}, {"dilations", Ints{1, 1}}}));
}

// ResNet-18 stage-1 basic block: 64 channels at 56x56.
Graph basic_block(bool explicit_pad) {
  Graph g;
  ValueId x = g.add_input("x", f32({1, 64, 56, 56}));
  ValueId w1 = g.add_input("w1", f32({64, 64, 3, 3})), w2 = g.add_input("w2", f32({64, 64, 3, 3}));
  ValueId y;
  if (explicit_pad) {
    ValueId p = g.add(OpKind::kPad, {x}, attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}));
    y = conv(g, p, w1, {0, 0, 0, 0});
  } else {
    y = conv(g, x, w1, {1, 1, 1, 1});
  }
  y = conv(g, g.add(OpKind::kRelu, {y}), w2, {1, 1, 1, 1});
  g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kAdd, {y, x})})});
  return g;
}

// Linear subprogram: two 64-channel 28x28 images through one conv, separately
// or stacked along H (wrong on the two seam rows).
Graph stacked_conv(bool batched) {
  Graph g;
  ValueId x0 = g.add_input("x0", f32({1, 64, 28, 28})), x1 = g.add_input("x1", f32({1, 64, 28, 28}));
  ValueId w = g.add_input("w", f32({64, 64, 3, 3}));
  Ints p = {1, 1, 1, 1};
  auto cat = [&](std::vector<ValueId> xs) { return g.add(OpKind::kConcat, std::move(xs), attrs({{"axis", int64_t{2}}})); };
  g.set_outputs({batched ? conv(g, cat({x0, x1}), w, p) : cat({conv(g, x0, w, p), conv(g, x1, w, p)})});
  return g;
}

double median_ms(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void run_case(const char* name, const Graph& orig, const Graph& cand, int reps, bool with_full) {
  Verdict v, vf;
  CheckOptions full;
  full.evaluation = CheckOptions::Evaluation::kFull;
  double check = median_ms(reps, [&] { v = check_equivalence(orig, cand); });
  double check_full = with_full ? median_ms(reps, [&] { vf = check_equivalence(orig, cand, full); }) : 0.0;
  std::vector<RefTensor<float>> in;
  for (ValueId i : orig.inputs()) {
    RefTensor<float> r;
    r.type = orig.type(i);
    r.num.assign(static_cast<size_t>(r.numel()), 0.5f);
    in.push_back(std::move(r));
  }
  double eval = median_ms(reps, [&] { interpret<float>(orig, in); });
  std::printf("%-34s check %8.1f ms (%s)", name, check, v.sampled_boxes ? "sampled boxes" : "full eval");
  if (with_full) std::printf("  full-eval check %8.1f ms  speedup %5.1fx", check_full, check_full / check);
  std::printf("  float eval of original %7.1f ms\n    %s\n", eval, v.summary().c_str());
  if (with_full && (v.kind != vf.kind || v.differing.size() != vf.differing.size()))
    std::printf("    MISMATCH: full evaluation says %s\n", vf.summary().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  bool with_full = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--full") with_full = true;
    else reps = std::max(1, std::atoi(argv[i]));
  }
  std::printf("verifier check time, median of %d%s\n", reps, with_full ? ", default path vs forced full evaluation" : "");
  run_case("bert-attention fused-qkv", attention(false), attention(true), reps, with_full);
  run_case("resnet-basic-block explicit-pad", basic_block(false), basic_block(true), reps, with_full);
  run_case("resnet-conv batch-along-h", stacked_conv(false), stacked_conv(true), reps, with_full);
  return 0;
}
