#include "optim/adagrad.h"

#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// Duchi et al.'s Adagrad as torch.optim.Adagrad documents it, in double.
std::vector<std::vector<double>> adagrad_reference(double eps, double lr_decay, double initial,
                                                   double wd) {
  std::vector<double> sum(kSize, initial);
  return reference_steps(
      [&](std::vector<double>& p, const std::vector<double>& g0, double lr, int t) {
        const double clr = lr / (1 + (t - 1) * lr_decay);
        for (const RefSegment& s : ref_segments()) {
          for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            const auto k = static_cast<size_t>(i);
            const double g = g0[k] + (s.decay ? wd * p[k] : 0.0);
            sum[k] += g * g;
            p[k] -= clr * g / (std::sqrt(sum[k]) + eps);
          }
        }
      });
}

TEST(Adagrad, MatchesFormulaWithDefaults) {
  Adagrad opt(example_segments(), kSize);
  expect_three_steps(opt, adagrad_reference(1e-10, 0.0, 0.0, 0.0));
}

TEST(Adagrad, MatchesFormulaWithDecayAndInitialAccumulator) {
  Adagrad opt(
      example_segments(), kSize,
      {.eps = 1e-3f, .lr_decay = 0.5f, .initial_accumulator_value = 0.1f, .weight_decay = 0.3f});
  expect_three_steps(opt, adagrad_reference(1e-3, 0.5, 0.1, 0.3));
  // The accumulator starts at the initial value only inside the segments.
  Adagrad fresh(example_segments(), kSize, {.initial_accumulator_value = 0.1f});
  const Tensor sum = fresh.state()[0].second;
  EXPECT_EQ(fresh.state()[0].first, "sum");
  EXPECT_EQ(sum.f32()[0], 0.1f);
  EXPECT_EQ(sum.f32()[3], 0.0f);
}

}  // namespace
}  // namespace braid::optim::test
