// Element types of tensors, their sizes and names, and the 16-bit float
// conversions the interpreter and importer share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI8, kU8, kBool };

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16,
                                       DType::kF64, DType::kI64, DType::kI32,
                                       DType::kI8,  DType::kU8,  DType::kBool};

size_t dtype_size(DType t);
// Short lowercase name used by the text form: f32, f16, bf16, f64, i64, ...
const char* dtype_name(DType t);
// Inverse of dtype_name; throws Error(kParse) on an unknown name.
DType dtype_from_name(std::string_view name);

inline bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}
inline bool is_integer(DType t) { return !is_float(t); }  // bool counts as integer

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);  // round to nearest even

}  // namespace tessera
