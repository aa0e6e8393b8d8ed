// The op kinds oneDNN runs: convolution, matmul and Gemm, pooling, binary and
// eltwise ops, softmax, layer and batch normalization, reductions, reorders.
#pragma once

#include <functional>
#include <memory>

#include "runtime/cpu/onednn_kernel.h"

namespace tessera::runtime::cpu {

struct BuildContext {
  const Graph& g;
  std::shared_ptr<Onednn> dnn;
  std::function<Md(ValueId)> md_of;  // a value's current layout
  bool plain_output = false;         // the group's output must be row-major
  // A kernel already built for this group (another thread count) whose
  // prepacked weights the new one reuses where the format agrees.
  const OnednnKernel* weights_from = nullptr;
  // The type of the group's float tensors in the graph. f32 and bf16 run
  // in their own type (bf16 with f32 accumulation, oneDNN's brgemm kernels on
  // AVX512-BF16 / AMX hosts); f16, which oneDNN 2.6 has no CPU kernels for,
  // is built over f32 (compute_type) and the compiler converts around it.
  DType dtype = DType::kF32;
  // Constants as the kernel reads them (the f16 path's weights widened to
  // f32 once, at compile); unset: the graph's.
  std::function<const Tensor*(ValueId)> constant;
};

// The element type the group's primitives compute in.
dnnl::memory::data_type compute_type(DType dtype);

struct Built {
  std::unique_ptr<OnednnKernel> kernel;  // nullptr: oneDNN has no primitive for this group
  Md out_md;
};

// Throws dnnl::error when oneDNN rejects the configuration (the caller
// splits the group or falls back).
Built make_onednn_kernel(const BuildContext& c, const FusedGroup& grp);

std::unique_ptr<OnednnKernel> make_reorder(std::shared_ptr<Onednn> dnn, ValueId from, const Md& from_md, ValueId to,
                                           const Md& to_md);

}  // namespace tessera::runtime::cpu
