#include "optim/lamb.h"

#include <algorithm>

#include "core/error.h"
#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// You et al. (2019) Algorithm 2 (LAMB) with bias correction, in double; decay=false
// segments take wd = 0 and ratio 1.
std::vector<std::vector<double>> lamb_reference(double b1, double b2, double eps, double wd,
                                                double max_trust = 0) {
  std::vector<double> m(kSize, 0.0), v(kSize, 0.0), r(kSize, 0.0);
  return reference_steps(
      [&](std::vector<double>& p, const std::vector<double>& g, double lr, int t) {
        for (const RefSegment& s : ref_segments()) {
          double r_sq = 0, p_sq = 0;
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            const auto k = static_cast<size_t>(i);
            m[k] = b1 * m[k] + (1 - b1) * g[k];
            v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k];
            const double m_hat = m[k] / (1 - std::pow(b1, t));
            const double v_hat = v[k] / (1 - std::pow(b2, t));
            r[k] = m_hat / (std::sqrt(v_hat) + eps) + (s.decay ? wd * p[k] : 0.0);
            r_sq += r[k] * r[k];
            p_sq += p[k] * p[k];
          }
          double ratio = s.decay && r_sq > 0 && p_sq > 0 ? std::sqrt(p_sq) / std::sqrt(r_sq) : 1.0;
          if (s.decay && max_trust > 0) ratio = std::min(ratio, max_trust);
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i)
            p[static_cast<size_t>(i)] -= lr * ratio * r[static_cast<size_t>(i)];
        }
      });
}

TEST(Lamb, MatchesFormula) {
  Lamb opt(example_segments(), kSize, {.beta1 = 0.9f, .beta2 = 0.999f, .weight_decay = 0.01f});
  expect_three_steps(opt, lamb_reference(0.9, 0.999, 1e-6, 0.01));
}

TEST(Lamb, MatchesFormulaWithStrongDecayAndEps) {
  Lamb opt(example_segments(), kSize,
           {.beta1 = 0.5f, .beta2 = 0.9f, .eps = 0.1f, .weight_decay = 0.5f});
  expect_three_steps(opt, lamb_reference(0.5, 0.9, 0.1, 0.5));
}

// DeepSpeed's FusedLamb as its CUDA kernel computes it (csrc/lamb/fused_lamb_cuda_kernel.cu),
// in double: raw moments in the direction, every tensor adapted with the ratio clamped to
// [min_coeff, max_coeff], the bias correction sqrt(1 - b2^t) / (1 - b1^t) on the step.
std::vector<std::vector<double>> fused_lamb_reference(double b1, double b2, double eps, double wd,
                                                      double min_coeff, double max_coeff,
                                                      bool bias_correction) {
  std::vector<double> m(kSize, 0.0), v(kSize, 0.0), u(kSize, 0.0);
  return reference_steps(
      [&](std::vector<double>& p, const std::vector<double>& g, double lr, int t) {
        const double step_size =
            bias_correction ? lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)) : lr;
        for (const RefSegment& s : ref_segments()) {
          double u_sq = 0, w_sq = 0;
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            const auto k = static_cast<size_t>(i);
            m[k] = b1 * m[k] + (1 - b1) * g[k];
            v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k];
            u[k] = m[k] / (std::sqrt(v[k]) + eps) + (s.decay ? wd * p[k] : 0.0);
            u_sq += u[k] * u[k];
            w_sq += p[k] * p[k];
          }
          double coeff = 1.0;
          if (w_sq > 0 && u_sq > 0)
            coeff = std::clamp(std::sqrt(w_sq) / std::sqrt(u_sq), min_coeff, max_coeff);
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i)
            p[static_cast<size_t>(i)] -= step_size * coeff * u[static_cast<size_t>(i)];
        }
      });
}

LambOptions fused(float wd, float min_trust, float max_trust, bool bias_correction) {
  return {.beta1 = 0.9f,
          .beta2 = 0.999f,
          .eps = 1e-8f,
          .weight_decay = wd,
          .form = LambOptions::Form::deepspeed,
          .bias_correction = bias_correction,
          .min_trust = min_trust,
          .max_trust = max_trust};
}

TEST(Lamb, DeepSpeedFormMatchesFusedLamb) {
  // FusedLamb's defaults: the clamp [0.01, 10] does not bind here, the bias segment is
  // adapted (ratio about 0.56), the correction is on the step.
  Lamb opt(example_segments(), kSize, fused(0.01f, 0.01f, 10.0f, true));
  expect_three_steps(opt, fused_lamb_reference(0.9f, 0.999f, 1e-8f, 0.01f, 0.01f, 10.0f, true));
}

TEST(Lamb, DeepSpeedFormClampsTheRatioAndCanDropTheCorrection) {
  // The weight's ratio (about 1.3) is cut to 0.8; the bias's (about 0.56) raised to 0.7.
  // The reference takes the float constants: without the correction, 1 - beta2 in float
  // (0.999f) is off by 1.3e-5 relative and nothing cancels it.
  Lamb opt(example_segments(), kSize, fused(0.1f, 0.7f, 0.8f, false));
  expect_three_steps(opt, fused_lamb_reference(0.9f, 0.999f, 1e-8f, 0.1f, 0.7f, 0.8f, false));
}

TEST(Lamb, PaperFormClampsTheRatioFromAbove) {
  LambOptions o{.beta1 = 0.9f, .beta2 = 0.999f, .weight_decay = 0.01f};
  o.max_trust = 0.5f;
  Lamb opt(example_segments(), kSize, o);
  expect_three_steps(opt, lamb_reference(0.9, 0.999, 1e-6, 0.01, 0.5));
}

TEST(Lamb, RefusesBoundsThatCross) {
  LambOptions o;
  o.min_trust = 2.0f;
  o.max_trust = 1.0f;
  EXPECT_THROW(Lamb(example_segments(), kSize, o), Error);
}

TEST(Lamb, LongSegmentMatchesFormula) {
  // Longer than the 16-wide blocked norm loop, with a tail, to cover both paths.
  const int64_t n = 37;
  Lamb opt({{"w", 0, n, true}}, n, {.weight_decay = 0.1f});
  std::vector<float> p(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    p[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    g[static_cast<size_t>(i)] = 0.05f * static_cast<float>(i % 5) - 0.1f;
  }
  std::vector<double> pd(p.begin(), p.end());
  opt.step(p.data(), g.data(), 0.01f);
  // Step 1: m_hat = g, v_hat = g^2, r = g / (|g| + eps) + wd p.
  double r_sq = 0, p_sq = 0;
  std::vector<double> r(static_cast<size_t>(n));
  for (size_t i = 0; i < r.size(); ++i) {
    const double gi = g[i];
    r[i] = gi / (std::abs(gi) + 1e-6) + 0.1 * pd[i];
    r_sq += r[i] * r[i];
    p_sq += pd[i] * pd[i];
  }
  const double ratio = std::sqrt(p_sq / r_sq);
  for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(p[i], pd[i] - 0.01 * ratio * r[i], 1e-6) << i;
}

}  // namespace
}  // namespace braid::optim::test
