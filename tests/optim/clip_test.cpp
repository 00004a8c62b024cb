#include "optim/clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace braid::optim {
namespace {

// Two segments with a padding float between them that must be neither counted nor scaled.
const std::vector<Segment> kSegments = {{"w", 0, 3, true}, {"b", 4, 2, false}};
std::vector<float> grads() { return {3.0f, 0.0f, -4.0f, 100.0f, 12.0f, 0.0f}; }  // norm 13

TEST(Clip, GlobalNormSkipsPadding) {
  const std::vector<float> g = grads();
  EXPECT_DOUBLE_EQ(grad_sum_squares(g.data(), kSegments), 169.0);
  EXPECT_DOUBLE_EQ(grad_norm(g.data(), kSegments), 13.0);
}

TEST(Clip, ScalesToMaxNormAndReturnsThePreClipNorm) {
  std::vector<float> g = grads();
  EXPECT_FLOAT_EQ(clip_grad_norm(g.data(), kSegments, 6.5f), 13.0f);
  const double coef = 6.5 / (13.0 + 1e-6);  // torch's clip_coef
  EXPECT_FLOAT_EQ(g[0], static_cast<float>(3.0 * coef));
  EXPECT_FLOAT_EQ(g[2], static_cast<float>(-4.0 * coef));
  EXPECT_FLOAT_EQ(g[4], static_cast<float>(12.0 * coef));
  EXPECT_EQ(g[3], 100.0f);
  EXPECT_NEAR(grad_norm(g.data(), kSegments), 6.5, 1e-5);
}

TEST(Clip, LeavesSmallGradientsBitwiseAlone) {
  std::vector<float> g = grads();
  EXPECT_FLOAT_EQ(clip_grad_norm(g.data(), kSegments, 20.0f), 13.0f);
  const std::vector<float> before = grads();
  EXPECT_EQ(std::memcmp(g.data(), before.data(), g.size() * sizeof(float)), 0);
}

TEST(Clip, SplitStepsEqualTheOneCall) {
  // What a distributed caller does: sum of squares per rank, all-reduce, then scale.
  std::vector<float> whole = grads(), split = grads();
  clip_grad_norm(whole.data(), kSegments, 1.0f);
  const std::vector<Segment> rank0 = {kSegments[0]}, rank1 = {kSegments[1]};
  const double sq = grad_sum_squares(split.data(), rank0) + grad_sum_squares(split.data(), rank1);
  const float coef = clip_coefficient(std::sqrt(sq), 1.0f);
  scale_grads(split.data(), rank0, coef);
  scale_grads(split.data(), rank1, coef);
  EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)), 0);
}

TEST(Clip, CoefficientFollowsTorch) {
  EXPECT_EQ(clip_coefficient(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_coefficient(0.0, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 1.0f), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(INFINITY, 1.0f), 0.0f);
  EXPECT_TRUE(std::isnan(clip_coefficient(NAN, 1.0f)));
  EXPECT_THROW(clip_coefficient(1.0, 0.0f), Error);
  EXPECT_THROW(clip_coefficient(1.0, -1.0f), Error);
}

}  // namespace
}  // namespace braid::optim
