#include "optim/adam.h"

#include <cmath>

#include "core/multiversion.h"

namespace braid::optim {
namespace {

// One pass over a segment. Adam passes l2 = wd and keep = 1; AdamW passes l2 = 0 and
// keep = 1 - lr wd. The scalars are formed in double by the caller, as torch does in Python.
BRAID_MULTIVERSION void adam_kernel(float* __restrict p, const float* __restrict g,
                                    float* __restrict m, float* __restrict v, int64_t n,
                                    float beta1, float one_minus_beta1, float beta2,
                                    float one_minus_beta2, float l2, float keep, float step_size,
                                    float bias_correction2_sqrt, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + l2 * p[i];
    const float mi = beta1 * m[i] + one_minus_beta1 * gi;
    const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    p[i] = p[i] * keep - step_size * (mi / denom);
  }
}

}  // namespace

Adam::Adam(std::vector<Segment> segments, int64_t buffer_size, const AdamOptions& options)
    : Optimizer(std::move(segments), buffer_size), options_(options) {
  const std::string_view n = name();
  detail::check_unit_interval(n, "beta1", options.beta1);
  detail::check_unit_interval(n, "beta2", options.beta2);
  detail::check_non_negative(n, "eps", options.eps);
  detail::check_non_negative(n, "weight_decay", options.weight_decay);
  exp_avg_ = add_state("exp_avg");
  exp_avg_sq_ = add_state("exp_avg_sq");
}

void Adam::update(float* params, const float* grads, float lr, int64_t step,
                  std::span<const Segment> segments) {
  const double beta1 = options_.beta1, beta2 = options_.beta2;
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, t);
  const double bias_correction2 = 1.0 - std::pow(beta2, t);
  const auto step_size = static_cast<float>(lr / bias_correction1);
  const auto bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  for (const Segment& s : segments) {
    const double wd = s.decay ? options_.weight_decay : 0.0;
    const bool decoupled = options_.decoupled_weight_decay;
    adam_kernel(params + s.offset, grads + s.offset, exp_avg_ + s.offset, exp_avg_sq_ + s.offset,
                s.numel, options_.beta1, static_cast<float>(1.0 - beta1), options_.beta2,
                static_cast<float>(1.0 - beta2), decoupled ? 0.0f : static_cast<float>(wd),
                decoupled ? static_cast<float>(1.0 - lr * wd) : 1.0f, step_size, bc2_sqrt,
                options_.eps);
  }
}

}  // namespace braid::optim
