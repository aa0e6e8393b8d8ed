// What the oneDNN op builders share across their files (onednn_ops.cc: the
// products, pooling, element-wise ops; onednn_norm_ops.cc: softmax,
// normalizations, reductions; onednn_concat.cc: concat). Not for use outside runtime/cpu.
#pragma once

#include "runtime/cpu/onednn_ops.h"

namespace tessera::runtime::cpu::detail {

// The constant the kernel reads for v (BuildContext::constant, else the
// graph's); nullptr for none.
const Tensor* constant_of(const BuildContext& c, ValueId v);
// oneDNN's element type of a float DType (f32, bf16, f16).
dnnl::memory::data_type tensor_type(DType t);
// Attributes with a user scratchpad and the post-ops, if any.
dnnl::primitive_attr make_attr(const PostOpsPlan* p);

Built make_softmax(const BuildContext& c, const FusedGroup& grp);
Built make_layer_norm(const BuildContext& c, const FusedGroup& grp);
Built make_batch_norm(const BuildContext& c, const FusedGroup& grp);
Built make_reduce(const BuildContext& c, const FusedGroup& grp);
Built make_concat(const BuildContext& c, const FusedGroup& grp);

}  // namespace tessera::runtime::cpu::detail
