// Element types a Tensor can hold. bf16 and f16 are stored as raw 16-bit patterns;
// conversion kernels live in core/convert.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace braid {

// f64 exists for collectives (comm/ reduces doubles); tensors of the engine use the rest.
enum class DType : uint8_t { f32, bf16, f16, i32, i64, f64 };

struct BFloat16 {
  uint16_t bits;
};
struct Half {
  uint16_t bits;
};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::f64:
      return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::f64:
      return "f64";
  }
  return "?";
}

// Maps a C++ element type to its DType, for typed accessors.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};

}  // namespace braid
