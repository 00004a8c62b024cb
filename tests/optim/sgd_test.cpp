#include "optim/sgd.h"

#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// torch.optim.SGD's documented algorithm (dampening 0), in double.
std::vector<std::vector<double>> sgd_reference(double momentum, bool nesterov, double wd) {
  std::vector<double> buf(kSize, 0.0);
  return reference_steps(
      [&](std::vector<double>& p, const std::vector<double>& g, double lr, int t) {
        for (const RefSegment& s : ref_segments()) {
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            const auto k = static_cast<size_t>(i);
            double d = g[k] + (s.decay ? wd * p[k] : 0.0);
            if (momentum != 0) {
              buf[k] = t == 1 ? d : momentum * buf[k] + d;
              d = nesterov ? d + momentum * buf[k] : buf[k];
            }
            p[k] -= lr * d;
          }
        }
      });
}

TEST(Sgd, PlainWithWeightDecayMatchesFormula) {
  Sgd opt(example_segments(), kSize, {.momentum = 0, .nesterov = false, .weight_decay = 0.1f});
  const auto expected = sgd_reference(0, false, 0.1);
  // One value by hand: w0 = 0.5 - 0.1 * (0.1 + 0.1 * 0.5); the bias takes no decay.
  EXPECT_NEAR(expected[0][0], 0.485, 1e-7);
  EXPECT_NEAR(expected[0][4], 0.25 - 0.1 * -0.4, 1e-7);
  expect_three_steps(opt, expected);
}

TEST(Sgd, MomentumMatchesFormula) {
  Sgd opt(example_segments(), kSize, {.momentum = 0.9f, .nesterov = false, .weight_decay = 0.1f});
  expect_three_steps(opt, sgd_reference(0.9, false, 0.1));
}

TEST(Sgd, NesterovMatchesFormula) {
  Sgd opt(example_segments(), kSize, {.momentum = 0.9f, .nesterov = true, .weight_decay = 0.1f});
  expect_three_steps(opt, sgd_reference(0.9, true, 0.1));
}

TEST(Sgd, StateIsTheMomentumBufferOnlyWithMomentum) {
  Sgd plain(example_segments(), kSize);
  ASSERT_EQ(plain.state().size(), 1u);
  EXPECT_EQ(plain.state()[0].first, "step");
  Sgd heavy(example_segments(), kSize, {.momentum = 0.5f});
  ASSERT_EQ(heavy.state().size(), 2u);
  EXPECT_EQ(heavy.state()[0].first, "momentum_buffer");
  EXPECT_EQ(heavy.state()[0].second.shape(), Shape({kSize}));
}

TEST(Sgd, NesterovWithoutMomentumIsAnError) {
  EXPECT_THROW(Sgd(example_segments(), kSize, {.momentum = 0, .nesterov = true}), Error);
  EXPECT_THROW(Sgd(example_segments(), kSize, {.momentum = -0.1f}), Error);
}

}  // namespace
}  // namespace braid::optim::test
