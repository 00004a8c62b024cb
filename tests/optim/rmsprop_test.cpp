#include "optim/rmsprop.h"

#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// Hinton's RMSprop as torch.optim.RMSprop documents it (non-centered), in double.
std::vector<std::vector<double>> rmsprop_reference(double alpha, double eps, double momentum,
                                                   double wd) {
  std::vector<double> sq(kSize, 0.0), buf(kSize, 0.0);
  return reference_steps(
      [&](std::vector<double>& p, const std::vector<double>& g0, double lr, int) {
        for (const RefSegment& s : ref_segments()) {
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            const auto k = static_cast<size_t>(i);
            const double g = g0[k] + (s.decay ? wd * p[k] : 0.0);
            sq[k] = alpha * sq[k] + (1 - alpha) * g * g;
            const double step = g / (std::sqrt(sq[k]) + eps);
            if (momentum > 0) {
              buf[k] = momentum * buf[k] + step;
              p[k] -= lr * buf[k];
            } else {
              p[k] -= lr * step;
            }
          }
        }
      });
}

TEST(RmsProp, MatchesFormula) {
  RmsProp opt(example_segments(), kSize, {.alpha = 0.9f, .eps = 1e-3f, .weight_decay = 0.1f});
  expect_three_steps(opt, rmsprop_reference(0.9, 1e-3, 0.0, 0.1));
  EXPECT_EQ(opt.state().size(), 2u);  // square_avg, step
}

TEST(RmsProp, MomentumMatchesFormula) {
  RmsProp opt(example_segments(), kSize,
              {.alpha = 0.5f, .eps = 1e-8f, .momentum = 0.8f, .weight_decay = 0.2f});
  expect_three_steps(opt, rmsprop_reference(0.5, 1e-8, 0.8, 0.2));
  const auto state = opt.state();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].first, "square_avg");
  EXPECT_EQ(state[1].first, "momentum_buffer");
}

}  // namespace
}  // namespace braid::optim::test
