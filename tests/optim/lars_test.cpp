#include "optim/lars.h"

#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

double ref_norm(const std::vector<double>& x, const RefSegment& s) {
  double sq = 0;
  for (int64_t i = s.offset; i < s.offset + s.numel; ++i)
    sq += x[static_cast<size_t>(i)] * x[static_cast<size_t>(i)];
  return std::sqrt(sq);
}

// You, Gitman & Ginsburg (2017), Algorithm 1, with the learning rate outside the momentum
// as torch's SGD: d = local * (g + wd w) on decayed segments, d = g elsewhere.
std::vector<std::vector<double>> lars_reference(double eta, double momentum, bool nesterov,
                                                double wd) {
  std::vector<double> buf(kSize, 0.0);
  return reference_steps(
      [&](std::vector<double>& p, const std::vector<double>& g, double lr, int t) {
        for (const RefSegment& s : ref_segments()) {
          const double wn = ref_norm(p, s), gn = ref_norm(g, s);
          const double local = s.decay && wn > 0 && gn > 0 ? eta * wn / (gn + wd * wn) : 1.0;
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            const auto k = static_cast<size_t>(i);
            double d = s.decay ? local * (g[k] + wd * p[k]) : g[k];
            if (momentum > 0) {
              buf[k] = t == 1 ? d : momentum * buf[k] + d;
              d = nesterov ? d + momentum * buf[k] : buf[k];
            }
            p[k] -= lr * d;
          }
        }
      });
}

TEST(Lars, MatchesFormulaWithMomentum) {
  Lars opt(example_segments(), kSize,
           {.momentum = 0.9f, .weight_decay = 0.01f, .trust_coefficient = 0.5f});
  expect_three_steps(opt, lars_reference(0.5, 0.9, false, 0.01));
}

TEST(Lars, MatchesFormulaWithNesterovAndWithout) {
  Lars nesterov(
      example_segments(), kSize,
      {.momentum = 0.8f, .nesterov = true, .weight_decay = 0.1f, .trust_coefficient = 0.02f});
  expect_three_steps(nesterov, lars_reference(0.02, 0.8, true, 0.1));
  Lars plain(example_segments(), kSize, {.weight_decay = 0.1f, .trust_coefficient = 0.3f});
  expect_three_steps(plain, lars_reference(0.3, 0.0, false, 0.1));
}

TEST(Lars, ZeroWeightNormFallsBackToRatioOne) {
  Lars opt({{"w", 0, 2, true}}, 2, {.weight_decay = 0.1f, .trust_coefficient = 0.001f});
  std::vector<float> p = {0.0f, 0.0f};
  const std::vector<float> g = {0.5f, -1.0f};
  opt.step(p.data(), g.data(), 0.1f);
  EXPECT_FLOAT_EQ(p[0], -0.05f);  // plain SGD step: ratio 1, wd * 0 = 0
  EXPECT_FLOAT_EQ(p[1], 0.1f);
}

}  // namespace
}  // namespace braid::optim::test
