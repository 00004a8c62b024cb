#include "optim/adam.h"

#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// Kingma & Ba's Adam with bias-corrected moments, in double; decoupled = AdamW
// (Loshchilov & Hutter): p *= 1 - lr wd before the Adam step instead of L2 in g.
std::vector<std::vector<double>> adam_reference(double b1, double b2, double eps, double wd,
                                                bool decoupled) {
  std::vector<double> m(kSize, 0.0), v(kSize, 0.0);
  return reference_steps(
      [&](std::vector<double>& p, const std::vector<double>& g0, double lr, int t) {
        for (const RefSegment& s : ref_segments()) {
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            const auto k = static_cast<size_t>(i);
            double g = g0[k];
            if (s.decay && !decoupled) g += wd * p[k];
            if (s.decay && decoupled) p[k] *= 1 - lr * wd;
            m[k] = b1 * m[k] + (1 - b1) * g;
            v[k] = b2 * v[k] + (1 - b2) * g * g;
            const double m_hat = m[k] / (1 - std::pow(b1, t));
            const double v_hat = v[k] / (1 - std::pow(b2, t));
            p[k] -= lr * m_hat / (std::sqrt(v_hat) + eps);
          }
        }
      });
}

TEST(Adam, MatchesFormulaWithL2WeightDecay) {
  Adam opt(example_segments(), kSize, {.beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f});
  EXPECT_EQ(opt.name(), "adam");
  expect_three_steps(opt, adam_reference(0.9, 0.99, 1e-8, 0.1, false));
}

TEST(Adam, AdamWDecouplesWeightDecay) {
  Adam opt(example_segments(), kSize,
           {.beta1 = 0.8f, .beta2 = 0.999f, .weight_decay = 0.5f, .decoupled_weight_decay = true});
  EXPECT_EQ(opt.name(), "adamw");
  expect_three_steps(opt, adam_reference(0.8, 0.999, 1e-8, 0.5, true));
}

TEST(Adam, LargeEpsDominatesTheDenominator) {
  Adam opt(example_segments(), kSize, {.eps = 0.5f});
  expect_three_steps(opt, adam_reference(0.9, 0.999, 0.5, 0.0, false));
}

TEST(Adam, StateNamesFollowPyTorch) {
  Adam opt(example_segments(), kSize);
  const auto s = opt.state();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].first, "exp_avg");
  EXPECT_EQ(s[1].first, "exp_avg_sq");
  EXPECT_EQ(s[2].first, "step");
}

TEST(Adam, BetaOutOfRangeIsAnErrorNamingIt) {
  try {
    Adam(example_segments(), kSize, {.beta1 = 1.0f});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beta1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::optim::test
