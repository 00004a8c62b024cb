// Shared fixture for the optimizer tests: a 6-float flat buffer holding a decayed weight
// "w" at [0, 3), one float of padding at 3, and a non-decayed bias "b" at [4, 6), with
// three steps of gradients and learning rates. References are written in double, per
// element, straight from each optimizer's published formula.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "optim/optimizer.h"

namespace braid::optim::test {

inline constexpr int64_t kSize = 6;
inline constexpr float kPad = 7.0f;  // the padding float; no optimizer may touch it

inline std::vector<Segment> example_segments() { return {{"w", 0, 3, true}, {"b", 4, 2, false}}; }
inline std::vector<float> example_params() { return {0.5f, -1.0f, 2.0f, kPad, 0.25f, -0.75f}; }
// The padding gradient is non-zero so reading it would show.
inline std::vector<float> example_grads(int step) {  // step 0, 1, 2
  static const float g[3][kSize] = {{0.1f, -0.2f, 0.3f, 9.0f, -0.4f, 0.05f},
                                    {-0.3f, 0.25f, 0.1f, 9.0f, 0.2f, -0.15f},
                                    {0.05f, 0.4f, -0.2f, 9.0f, -0.1f, 0.3f}};
  return {g[step], g[step] + kSize};
}
inline float example_lr(int step) { return step == 0 ? 0.1f : step == 1 ? 0.05f : 0.02f; }

// The example in double, for references.
struct RefSegment {
  int64_t offset, numel;
  bool decay;
};
inline std::vector<RefSegment> ref_segments() { return {{0, 3, true}, {4, 2, false}}; }
inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Runs `opt` for the three example steps, checking the parameters after each step against
// expected[step] (as produced by a double reference), and the padding float untouched.
inline void expect_three_steps(Optimizer& opt, const std::vector<std::vector<double>>& expected,
                               double tolerance = 5e-7) {
  std::vector<float> p = example_params();
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> g = example_grads(t);
    opt.step(p.data(), g.data(), example_lr(t));
    EXPECT_EQ(opt.steps(), t + 1);
    for (int64_t i = 0; i < kSize; ++i) {
      if (i == 3) {
        EXPECT_EQ(p[3], kPad) << "padding written at step " << t + 1;
        continue;
      }
      const double want = expected[static_cast<size_t>(t)][static_cast<size_t>(i)];
      EXPECT_NEAR(p[static_cast<size_t>(i)], want, tolerance * std::max(1.0, std::abs(want)))
          << opt.name() << " step " << t + 1 << " element " << i;
    }
  }
}

// Generic driver for a double reference: `update(p, g, lr, t)` mutates p (size kSize) for
// 1-based step t; returns the parameters after each of the three steps.
template <typename Update>
std::vector<std::vector<double>> reference_steps(Update update) {
  std::vector<double> p = to_double(example_params());
  std::vector<std::vector<double>> out;
  for (int t = 0; t < 3; ++t) {
    const std::vector<double> g = to_double(example_grads(t));
    update(p, g, static_cast<double>(example_lr(t)), t + 1);
    out.push_back(p);
  }
  return out;
}

}  // namespace braid::optim::test
