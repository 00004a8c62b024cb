// The per-head core of causal self-attention, without projections: for one (batch, head),
// q, k, v are [T, hd] row-major with row stride ld (views into the fused qkv buffer).
//
// Forward:  P = softmax(scale q k^T) over keys s <= t, y = P v.
// Backward: given dy, P: dv = P^T dy, dP = dy v^T, dS = scale P (dP - rowsum(dP P)),
//           dq = dS k, dk = dS^T q (written, not accumulated).
// Only the causal triangle is computed, in register tiles of 4 rows x 16 columns; P is
// stored [T, T] with zeros above the diagonal. `work` is scratch of
// attention_work_floats(T, hd) floats, owned by the caller (one per cache: no allocation).
#pragma once

#include <cstdint>

namespace braid::nn {

int64_t attention_work_floats(int64_t T, int64_t hd);

void attention_head_forward(const float* q, const float* k, const float* v, int64_t ld, int64_t T,
                            int64_t hd, float scale, float* p, float* y, int64_t ldy, float* work);

void attention_head_backward(const float* q, const float* k, const float* v, int64_t ld,
                             const float* p, const float* dy, int64_t ldy, int64_t T, int64_t hd,
                             float scale, float* dq, float* dk, float* dv, int64_t ldd,
                             float* work);

}  // namespace braid::nn
