#include "optim/lamb.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/multiversion.h"

namespace braid::optim {
namespace {

struct LambScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction1, bias_correction2, eps, wd;
};

[[gnu::always_inline]] inline float direction(float m, float v, float p, const LambScalars& k) {
  return (m / k.bias_correction1) / (std::sqrt(v / k.bias_correction2) + k.eps) + k.wd * p;
}

// Pass 1 over a decay segment: updates the moments and returns sum(r^2) and sum(p^2) in
// double, in sixteen interleaved partial sums (vectorisable, and independent of the ISA).
BRAID_MULTIVERSION void lamb_moments(const float* __restrict p, const float* __restrict g,
                                     float* __restrict m, float* __restrict v, int64_t n,
                                     const LambScalars& k, double* r_sq, double* p_sq) {
  double acc_r[16] = {}, acc_p[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int64_t j = 0; j < 16; ++j) {
      const float gi = g[i + j];
      const float mi = k.beta1 * m[i + j] + k.one_minus_beta1 * gi;
      const float vi = k.beta2 * v[i + j] + k.one_minus_beta2 * gi * gi;
      m[i + j] = mi;
      v[i + j] = vi;
      const float r = direction(mi, vi, p[i + j], k);
      acc_r[j] += static_cast<double>(r) * r;
      acc_p[j] += static_cast<double>(p[i + j]) * p[i + j];
    }
  }
  double sr = 0, sp = 0;
  for (int j = 0; j < 16; ++j) {
    sr += acc_r[j];
    sp += acc_p[j];
  }
  for (; i < n; ++i) {
    const float gi = g[i];
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float r = direction(mi, vi, p[i], k);
    sr += static_cast<double>(r) * r;
    sp += static_cast<double>(p[i]) * p[i];
  }
  *r_sq = sr;
  *p_sq = sp;
}

// Pass 2: p -= step * r, recomputing r from the updated moments rather than storing it
// (no scratch buffer; the same expression gives the same r).
BRAID_MULTIVERSION void lamb_apply(float* __restrict p, const float* __restrict m,
                                   const float* __restrict v, int64_t n, const LambScalars& k,
                                   float step) {
  for (int64_t i = 0; i < n; ++i) p[i] -= step * direction(m[i], v[i], p[i], k);
}

// Segments without layer adaptation (ratio 1): moments and update in one pass.
BRAID_MULTIVERSION void lamb_fused(float* __restrict p, const float* __restrict g,
                                   float* __restrict m, float* __restrict v, int64_t n,
                                   const LambScalars& k, float lr) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * direction(mi, vi, p[i], k);
  }
}

}  // namespace

Lamb::Lamb(std::vector<Segment> segments, int64_t buffer_size, const LambOptions& options)
    : Optimizer(std::move(segments), buffer_size), options_(options) {
  detail::check_unit_interval("lamb", "beta1", options.beta1);
  detail::check_unit_interval("lamb", "beta2", options.beta2);
  detail::check_non_negative("lamb", "eps", options.eps);
  detail::check_non_negative("lamb", "weight_decay", options.weight_decay);
  detail::check_non_negative("lamb", "min_trust", options.min_trust);
  detail::check_non_negative("lamb", "max_trust", options.max_trust);
  BRAID_CHECK(options.max_trust == 0 || options.max_trust >= options.min_trust,
              "lamb: max_trust = ", options.max_trust, " is below min_trust = ", options.min_trust,
              " (0 leaves the ratio without an upper bound)");
  exp_avg_ = add_state("exp_avg");
  exp_avg_sq_ = add_state("exp_avg_sq");
}

double Lamb::trust_ratio(double p_sq, double r_sq) const {
  if (p_sq <= 0 || r_sq <= 0) return 1.0;
  double ratio = std::sqrt(p_sq) / std::sqrt(r_sq);
  ratio = std::max(ratio, static_cast<double>(options_.min_trust));
  if (options_.max_trust > 0) ratio = std::min(ratio, static_cast<double>(options_.max_trust));
  return ratio;
}

void Lamb::update(float* params, const float* grads, float lr, int64_t step,
                  std::span<const Segment> segments) {
  const double beta1 = options_.beta1, beta2 = options_.beta2;
  const double t = static_cast<double>(step);
  const double correction1 = options_.bias_correction ? 1.0 - std::pow(beta1, t) : 1.0;
  const double correction2 = options_.bias_correction ? 1.0 - std::pow(beta2, t) : 1.0;
  const bool deepspeed = options_.form == LambOptions::Form::deepspeed;
  // DeepSpeed's direction uses the raw moments and corrects the step instead.
  LambScalars k{options_.beta1,
                static_cast<float>(1.0 - beta1),
                options_.beta2,
                static_cast<float>(1.0 - beta2),
                deepspeed ? 1.0f : static_cast<float>(correction1),
                deepspeed ? 1.0f : static_cast<float>(correction2),
                options_.eps,
                0.0f};
  const double step_scale = deepspeed ? std::sqrt(correction2) / correction1 : 1.0;
  for (const Segment& s : segments) {
    float* p = params + s.offset;
    const float* g = grads + s.offset;
    float* m = exp_avg_ + s.offset;
    float* v = exp_avg_sq_ + s.offset;
    k.wd = s.decay ? options_.weight_decay : 0.0f;
    if (!s.decay && !deepspeed) {
      lamb_fused(p, g, m, v, s.numel, k, lr);
      continue;
    }
    double r_sq = 0, p_sq = 0;
    lamb_moments(p, g, m, v, s.numel, k, &r_sq, &p_sq);
    const double trust = trust_ratio(p_sq, r_sq);
    lamb_apply(p, m, v, s.numel, k, static_cast<float>(lr * step_scale * trust));
  }
}

}  // namespace braid::optim
