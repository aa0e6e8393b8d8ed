// Times the CPU runtime's strided copies (Transpose, Slice, Concat, Split,
// Expand) on shapes of the sizes the suite's models move, one graph per case
// whose only kernel is the copy. Prints one JSON line per case: the median
// and minimum of `--repeat` runs of the plan.
//
// Usage: bench_copies [--threads N] [--repeat N] [--filter SUBSTRING]
// Two builds compared: run both binaries alternately and compare medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "runtime/runtime.h"

using namespace tessera;

namespace {

using Ints = std::vector<int64_t>;

Attrs attrs(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

struct Case {
  std::string name;
  Graph g;
};

Graph one_op(DType dt, const std::vector<Shape>& inputs, OpKind kind, const Attrs& a) {
  Graph g;
  std::vector<ValueId> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(g.add_input("x" + std::to_string(i), {dt, inputs[i]}));
  NodeId n = g.add_node(kind, in, a);
  g.set_outputs(g.node(n).outputs);
  return g;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, Graph g) { c.push_back({std::move(name), std::move(g)}); };
  DType f32 = DType::kF32, f16 = DType::kF16;
  add("transpose_nchw_nhwc", one_op(f32, {{8, 64, 56, 56}}, OpKind::kTranspose, attrs({{"perm", Ints{0, 2, 3, 1}}})));
  add("transpose_heads", one_op(f32, {{4, 128, 12, 64}}, OpKind::kTranspose, attrs({{"perm", Ints{0, 2, 1, 3}}})));
  add("transpose_last_two", one_op(f32, {{64, 256, 192}}, OpKind::kTranspose, attrs({{"perm", Ints{0, 2, 1}}})));
  add("slice_rows", one_op(f32, {{64, 1024, 96}}, OpKind::kSlice,
                           attrs({{"starts", Ints{100}}, {"ends", Ints{900}}, {"axes", Ints{1}}, {"steps", Ints{1}}})));
  add("slice_step2", one_op(f32, {{8, 64, 112, 112}}, OpKind::kSlice,
                            attrs({{"starts", Ints{0, 1}}, {"ends", Ints{112, 112}}, {"axes", Ints{2, 3}},
                                   {"steps", Ints{2, 2}}})));
  add("slice_reverse", one_op(f32, {{256, 4096}}, OpKind::kSlice,
                              attrs({{"starts", Ints{-1}}, {"ends", Ints{-5000}}, {"axes", Ints{1}}, {"steps", Ints{-1}}})));
  add("concat_f16_channels", one_op(f16, {{8, 64, 56, 56}, {8, 32, 56, 56}, {8, 32, 56, 56}}, OpKind::kConcat,
                                    attrs({{"axis", int64_t{1}}})));
  add("concat_f32_last", one_op(f32, {{1024, 768}, {1024, 768}, {1024, 768}}, OpKind::kConcat,
                                attrs({{"axis", int64_t{-1}}})));
  add("split_qkv", one_op(f32, {{4, 256, 2304}}, OpKind::kSplit,
                          attrs({{"axis", int64_t{2}}, {"split", Ints{768, 768, 768}}})));
  add("split_channels", one_op(f32, {{8, 128, 56, 56}}, OpKind::kSplit,
                               attrs({{"axis", int64_t{1}}, {"split", Ints{64, 64}}})));
  add("expand_rows", one_op(f32, {{1, 256, 1}}, OpKind::kExpand, attrs({{"shape", Ints{64, 256, 128}}})));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  runtime::RunOptions opt;
  opt.one_thread_runs = runtime::RunOptions::OneThreadRuns::kNever;
  int repeat = 50;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--threads") opt.threads = std::stoi(next());
    else if (a == "--repeat") repeat = std::stoi(next());
    else if (a == "--filter") filter = next();
    else {
      std::cerr << "usage: bench_copies [--threads N] [--repeat N] [--filter SUBSTRING]\n";
      return 2;
    }
  }
  try {
    std::mt19937 rng(1);
    for (Case& c : cases()) {
      if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
      runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(c.g, opt);
      std::vector<Tensor> inputs;
      for (ValueId v : c.g.inputs()) {
        Tensor t(c.g.type(v).dtype, c.g.type(v).shape);
        uint8_t* p = t.mutable_data();
        for (int64_t b = 0; b < t.nbytes(); ++b) p[b] = static_cast<uint8_t>(rng());
        inputs.push_back(std::move(t));
      }
      for (int i = 0; i < 3; ++i) plan.run(inputs);
      std::vector<double> ms;
      for (int i = 0; i < repeat; ++i) {
        auto s = std::chrono::steady_clock::now();
        plan.run(inputs);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
      }
      std::sort(ms.begin(), ms.end());
      std::printf("{\"case\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"kernels\": %lld}\n", c.name.c_str(),
                  ms[ms.size() / 2], ms.front(), static_cast<long long>(plan.num_kernels()));
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
