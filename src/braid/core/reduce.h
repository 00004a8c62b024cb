// Elementwise reduction kernels for collectives: dst = op(dst, src) over `count` elements
// of one dtype. Vectorised (BRAID_MULTIVERSION); bf16 and f16 are widened to f32, combined
// and rounded back (round-to-nearest-even) element by element, so a result depends only on
// the order in which operands are combined, never on the code path: collectives that fix
// the order get bitwise-identical results on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace braid {

// avg is reduced as sum; the collective divides by the group size once at the end
// (scale_by_inverse), so partial results stay exact sums.
enum class ReduceOp : uint8_t { sum, avg, min, max, prod };
std::string_view reduce_op_name(ReduceOp op);

// dst[i] = op(dst[i], src[i]); dst and src may not overlap partially (equal is allowed).
void reduce_into(DType dtype, ReduceOp op, void* dst, const void* src, size_t count);
// out[i] = op(a[i], b[i]); out may equal a or b.
void reduce_pair(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t count);
// x[i] /= divisor, for avg: floats are multiplied by 1/divisor in f32 (f64 for f64),
// integers divided with truncation toward zero.
void divide_by(DType dtype, void* x, size_t count, int64_t divisor);

}  // namespace braid
