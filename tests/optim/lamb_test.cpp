#include "optim/lamb.h"

#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// You et al. (2019) Algorithm 2 (LAMB) with bias correction, in double; decay=false
// segments take wd = 0 and ratio 1.
std::vector<std::vector<double>> lamb_reference(double b1, double b2, double eps, double wd) {
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
          const double ratio =
              s.decay && r_sq > 0 && p_sq > 0 ? std::sqrt(p_sq) / std::sqrt(r_sq) : 1.0;
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
