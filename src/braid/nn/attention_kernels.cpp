#include "nn/attention_kernels.h"

#include <cmath>
#include <cstring>

#include "nn/fast_math.h"

namespace braid::nn {
namespace {

using fast_math::exp_neg;
using fast_math::from_ordered_bits;
using fast_math::ordered_bits;

// Eight floats in GCC's generic vector extension: one AVX register in the AVX2 and AVX-512
// builds, two SSE registers in the baseline build. Loads and stores go through memcpy
// (unaligned, alias-safe).
using v8 = float __attribute__((vector_size(32)));

constexpr int64_t kRows = 4;   // rows per register tile
constexpr int64_t kCols = 16;  // score columns per register tile (two vectors)

int64_t padded(int64_t T) { return (T + kCols - 1) / kCols * kCols; }

[[gnu::always_inline]] inline void load(v8& x, const float* p) { std::memcpy(&x, p, sizeof x); }
[[gnu::always_inline]] inline void store(float* p, const v8& x) { std::memcpy(p, &x, sizeof x); }

// bt[d, s] = b[s, d] for s < n (b has row stride ld), zero for n <= s < ldt.
[[gnu::always_inline]] inline void transpose_padded(const float* b, int64_t ld, int64_t n,
                                                    int64_t hd, float* bt, int64_t ldt) {
  for (int64_t d = 0; d < hd; ++d) {
    float* row = bt + d * ldt;
    for (int64_t s = 0; s < n; ++s) row[s] = b[s * ld + d];
    for (int64_t s = n; s < ldt; ++s) row[s] = 0.0f;
  }
}

// One R x 16 tile of out = alpha a bt: a at its first row (stride lda), bt at its first
// column (stride ldt), out at the tile's corner (stride ldo).
template <int R>
[[gnu::always_inline]] inline void scores_tile(const float* a, int64_t lda, const float* bt,
                                               int64_t ldt, int64_t hd, float alpha, float* out,
                                               int64_t ldo) {
  v8 acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = v8{};
  for (int64_t d = 0; d < hd; ++d) {
    v8 b0, b1;
    load(b0, bt + d * ldt);
    load(b1, bt + d * ldt + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float x = a[r * lda + d];
      acc[r][0] += x * b0;
      acc[r][1] += x * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    store(out + r * ldo, acc[r][0] * alpha);
    store(out + r * ldo + 8, acc[r][1] * alpha);
  }
}

// out[t, s] = alpha a[t] . b[s] for t < n and each 16-column chunk holding some s <= t;
// entries right of the diagonal inside such a chunk are left meaningless. bt = b^T is
// zero-padded to ldt = padded(n) columns; out has row stride >= padded(n).
[[gnu::always_inline]] inline void causal_scores(const float* a, int64_t lda, const float* bt,
                                                 int64_t ldt, int64_t n, int64_t hd, float alpha,
                                                 float* out, int64_t ldo) {
  int64_t t0 = 0;
  for (; t0 + kRows <= n; t0 += kRows)
    for (int64_t s0 = 0; s0 < t0 + kRows; s0 += kCols)
      scores_tile<kRows>(a + t0 * lda, lda, bt + s0, ldt, hd, alpha, out + t0 * ldo + s0, ldo);
  for (; t0 < n; ++t0)
    for (int64_t s0 = 0; s0 <= t0; s0 += kCols)
      scores_tile<1>(a + t0 * lda, lda, bt + s0, ldt, hd, alpha, out + t0 * ldo + s0, ldo);
}

// One R-row, 8C-column tile of out = sum_{j in [j0, j1)} A(r, j) v[j, :], where
// A(r, j) = a[r rs + j cs]; pointers at the tile's first row / column.
template <int R, int C>
[[gnu::always_inline]] inline void mix_tile(const float* a, int64_t rs, int64_t cs, const float* v,
                                            int64_t ldv, int64_t j0, int64_t j1, float* out,
                                            int64_t ldo) {
  v8 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) acc[r][c] = v8{};
  for (int64_t j = j0; j < j1; ++j) {
    v8 x[C];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) load(x[c], v + j * ldv + 8 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float w = a[r * rs + j * cs];
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) acc[r][c] += w * x[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) store(out + r * ldo + 8 * c, acc[r][c]);
}

template <int R>
[[gnu::always_inline]] inline void mix_rows(const float* a, int64_t rs, int64_t cs, const float* v,
                                            int64_t ldv, int64_t j0, int64_t j1, int64_t hd,
                                            float* out, int64_t ldo) {
  int64_t c0 = 0;
  for (; c0 + 16 <= hd; c0 += 16) mix_tile<R, 2>(a, rs, cs, v + c0, ldv, j0, j1, out + c0, ldo);
  if (c0 + 8 <= hd) {
    mix_tile<R, 1>(a, rs, cs, v + c0, ldv, j0, j1, out + c0, ldo);
    c0 += 8;
  }
  for (; c0 < hd; ++c0)  // head widths that are not a multiple of 8
    for (int r = 0; r < R; ++r) {
      float s = 0;
      for (int64_t j = j0; j < j1; ++j) s += a[r * rs + j * cs] * v[j * ldv + c0];
      out[r * ldo + c0] = s;
    }
}

// out[i, :] = sum over j <= i (lower) or j >= i (upper) of A(i, j) v[j, :] for i < n,
// A(i, j) = a[i rs + j cs]. The rows of a tile share one range of j, so A must be zero on
// the wrong side of the diagonal (P and dS are).
template <bool kUpper>
[[gnu::always_inline]] inline void causal_mix(const float* a, int64_t rs, int64_t cs,
                                              const float* v, int64_t ldv, int64_t n, int64_t hd,
                                              float* out, int64_t ldo) {
  int64_t i0 = 0;
  for (; i0 + kRows <= n; i0 += kRows)
    mix_rows<kRows>(a + i0 * rs, rs, cs, v, ldv, kUpper ? i0 : 0, kUpper ? n : i0 + kRows, hd,
                    out + i0 * ldo, ldo);
  for (; i0 < n; ++i0)
    mix_rows<1>(a + i0 * rs, rs, cs, v, ldv, kUpper ? i0 : 0, kUpper ? n : i0 + 1, hd,
                out + i0 * ldo, ldo);
}

// p[t, :] = softmax of scores[t, 0..t], zero for t < s < n.
[[gnu::always_inline]] inline void causal_softmax(const float* scores, int64_t lds, float* p,
                                                  int64_t ldp, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    const float* x = scores + t * lds;
    float* row = p + t * ldp;
    const int64_t m_count = t + 1;
    // The max through integer images of the floats, which vectorises (see fast_math.h).
    int32_t mx[16];
    for (int k = 0; k < 16; ++k) mx[k] = ordered_bits(x[0]);
    int64_t s = 0;
    for (; s + 16 <= m_count; s += 16)
      for (int k = 0; k < 16; ++k) {
        const int32_t b = ordered_bits(x[s + k]);
        mx[k] = b > mx[k] ? b : mx[k];
      }
    int32_t mi = mx[0];
    for (int k = 1; k < 16; ++k) mi = mx[k] > mi ? mx[k] : mi;
    for (; s < m_count; ++s) mi = ordered_bits(x[s]) > mi ? ordered_bits(x[s]) : mi;
    const float m = from_ordered_bits(mi);
    if (std::isnan(m)) {  // exp_neg would clamp NaN away: keep divergence visible instead
      for (s = 0; s < m_count; ++s) row[s] = m;
    } else {
      float acc[16] = {};
      for (s = 0; s + 16 <= m_count; s += 16)
        for (int k = 0; k < 16; ++k) {
          row[s + k] = exp_neg(m - x[s + k]);
          acc[k] += row[s + k];
        }
      float sum = 0;
      for (int k = 0; k < 16; ++k) sum += acc[k];
      for (; s < m_count; ++s) {
        row[s] = exp_neg(m - x[s]);
        sum += row[s];
      }
      const float inv = 1.0f / sum;
      for (s = 0; s < m_count; ++s) row[s] *= inv;
    }
    for (s = m_count; s < n; ++s) row[s] = 0.0f;
  }
}

// d holds dP on entry and dS = scale P (dP - <dP, P>) on exit, zero for t < s < n.
[[gnu::always_inline]] inline void causal_softmax_backward(const float* p, int64_t ldp, float* d,
                                                           int64_t ldd, int64_t n, float scale) {
  for (int64_t t = 0; t < n; ++t) {
    const float* pr = p + t * ldp;
    float* dr = d + t * ldd;
    const int64_t m_count = t + 1;
    float acc[16] = {};
    int64_t s = 0;
    for (; s + 16 <= m_count; s += 16)
      for (int k = 0; k < 16; ++k) acc[k] += pr[s + k] * dr[s + k];
    float dot = 0;
    for (int k = 0; k < 16; ++k) dot += acc[k];
    for (; s < m_count; ++s) dot += pr[s] * dr[s];
    for (s = 0; s < m_count; ++s) dr[s] = scale * pr[s] * (dr[s] - dot);
    for (; s < n; ++s) dr[s] = 0.0f;
  }
}

[[gnu::always_inline]] inline void head_forward(const float* q, const float* k, const float* v,
                                                int64_t ld, int64_t T, int64_t hd, float scale,
                                                float* p, float* y, int64_t ldy, float* work) {
  const int64_t tp = padded(T);
  float* scores = work;       // [T, tp]
  float* kt = work + T * tp;  // [hd, tp]
  transpose_padded(k, ld, T, hd, kt, tp);
  causal_scores(q, ld, kt, tp, T, hd, scale, scores, tp);
  causal_softmax(scores, tp, p, T, T);
  causal_mix<false>(p, T, 1, v, ld, T, hd, y, ldy);  // y = P v
}

[[gnu::always_inline]] inline void head_backward(const float* q, const float* k, const float* v,
                                                 int64_t ld, const float* p, const float* dy,
                                                 int64_t ldy, int64_t T, int64_t hd, float scale,
                                                 float* dq, float* dk, float* dv, int64_t ldd,
                                                 float* work) {
  const int64_t tp = padded(T);
  float* ds = work;                                    // [T, tp]: dP, then dS
  float* vt = work + T * tp;                           // [hd, tp]
  causal_mix<true>(p, 1, T, dy, ldy, T, hd, dv, ldd);  // dv = P^T dy
  transpose_padded(v, ld, T, hd, vt, tp);
  causal_scores(dy, ldy, vt, tp, T, hd, 1.0f, ds, tp);  // dP = dy v^T
  causal_softmax_backward(p, T, ds, tp, T, scale);
  causal_mix<false>(ds, tp, 1, k, ld, T, hd, dq, ldd);  // dq = dS k
  causal_mix<true>(ds, 1, tp, q, ld, T, hd, dk, ldd);   // dk = dS^T q
}

}  // namespace

int64_t attention_work_floats(int64_t T, int64_t hd) { return (T + hd) * padded(T); }

void attention_head_forward(const float* q, const float* k, const float* v, int64_t ld, int64_t T,
                            int64_t hd, float scale, float* p, float* y, int64_t ldy, float* work) {
  fast_math::run_best<head_forward>(q, k, v, ld, T, hd, scale, p, y, ldy, work);
}

void attention_head_backward(const float* q, const float* k, const float* v, int64_t ld,
                             const float* p, const float* dy, int64_t ldy, int64_t T, int64_t hd,
                             float scale, float* dq, float* dk, float* dv, int64_t ldd,
                             float* work) {
  fast_math::run_best<head_backward>(q, k, v, ld, p, dy, ldy, T, hd, scale, dq, dk, dv, ldd, work);
}

}  // namespace braid::nn
