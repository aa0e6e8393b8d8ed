// Conversions between the 16-bit float types (f16, bf16) and f32, the one
// place the CPU backend widens and narrows: the kernels that compute a 16-bit
// tensor in f32 (fp16 on hosts whose oneDNN has no f16 kernels, native
// element-wise kernels) call these. Widening is exact; narrowing rounds to
// nearest even, as graph/dtype.h's float_to_half / float_to_bf16 do, so a
// kernel that widens, computes and narrows gives the interpreter's result for
// one rounding per output.
#pragma once

#include <cstdint>
#include <memory>

#include "graph/graph.h"
#include "runtime/kernel.h"

namespace tessera::runtime::cpu {

inline bool is_float16(DType t) { return t == DType::kF16 || t == DType::kBF16; }

// `from` is kF16 or kBF16. Vectorized (F16C for f16 where the CPU has it).
void widen_to_f32(DType from, const void* src, float* dst, int64_t n);
// `to` is kF16 or kBF16.
void narrow_from_f32(DType to, const float* src, void* dst, int64_t n);

// The same values as f32 (t is f16 or bf16), computed once at plan compile
// for weights that a kernel reads widened.
Tensor widen_tensor(const Tensor& t);

// A kernel converting `count` elements of value `from` (dtype `from_t`) into
// value `to` (dtype `to_t`); one of them is f32, the other f16 or bf16. The
// elements may be a blocked layout's padded buffer: conversion is per
// element, whatever the layout.
std::unique_ptr<Kernel> make_convert_kernel(ValueId from, DType from_t, ValueId to, DType to_t, int64_t count);

}  // namespace tessera::runtime::cpu
