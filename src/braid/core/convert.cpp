// Dispatch for the conversions in convert.h: pick the instruction-set loop, let it do
// the whole vectors, and finish the tail with the scalar reference.
#include "core/convert.h"

#include "core/convert_kernels.h"
#include "core/error.h"

namespace braid {
namespace {

void check_args(int64_t n, Isa isa, const char* what) {
  BRAID_CHECK(n >= 0, what, ": element count must be >= 0, got ", n);
  require_isa(isa, what);
}

}  // namespace

void f32_to_bf16(const float* in, BFloat16* out, int64_t n, Isa isa) {
  check_args(n, isa, "f32_to_bf16");
  int64_t done = 0;
  switch (isa) {
    case Isa::avx512_bf16:
      done = detail::f32_to_bf16_avx512bf16(in, out, n);
      break;
    case Isa::avx512:
      done = detail::f32_to_bf16_avx512(in, out, n);
      break;
    case Isa::avx2:
      done = detail::f32_to_bf16_avx2(in, out, n);
      break;
    case Isa::scalar:
      break;
  }
  for (int64_t i = done; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

void bf16_to_f32(const BFloat16* in, float* out, int64_t n, Isa isa) {
  check_args(n, isa, "bf16_to_f32");
  int64_t done = 0;
  switch (isa) {
    case Isa::avx512_bf16:
    case Isa::avx512:
      done = detail::bf16_to_f32_avx512(in, out, n);
      break;
    case Isa::avx2:
      done = detail::bf16_to_f32_avx2(in, out, n);
      break;
    case Isa::scalar:
      break;
  }
  for (int64_t i = done; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

void f32_to_f16(const float* in, Half* out, int64_t n, Isa isa) {
  check_args(n, isa, "f32_to_f16");
  int64_t done = 0;
  switch (isa) {
    case Isa::avx512_bf16:
    case Isa::avx512:
      done = detail::f32_to_f16_avx512(in, out, n);
      break;
    case Isa::avx2:
      done = detail::f32_to_f16_avx2(in, out, n);
      break;
    case Isa::scalar:
      break;
  }
  for (int64_t i = done; i < n; ++i) out[i] = float_to_half(in[i]);
}

void f16_to_f32(const Half* in, float* out, int64_t n, Isa isa) {
  check_args(n, isa, "f16_to_f32");
  int64_t done = 0;
  switch (isa) {
    case Isa::avx512_bf16:
    case Isa::avx512:
      done = detail::f16_to_f32_avx512(in, out, n);
      break;
    case Isa::avx2:
      done = detail::f16_to_f32_avx2(in, out, n);
      break;
    case Isa::scalar:
      break;
  }
  for (int64_t i = done; i < n; ++i) out[i] = half_to_float(in[i]);
}

void f32_to_bf16(const float* in, BFloat16* out, int64_t n) { f32_to_bf16(in, out, n, best_isa()); }
void bf16_to_f32(const BFloat16* in, float* out, int64_t n) { bf16_to_f32(in, out, n, best_isa()); }
void f32_to_f16(const float* in, Half* out, int64_t n) { f32_to_f16(in, out, n, best_isa()); }
void f16_to_f32(const Half* in, float* out, int64_t n) { f16_to_f32(in, out, n, best_isa()); }

}  // namespace braid
