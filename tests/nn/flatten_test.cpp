// Flatten: NHWC -> [B, C*H*W] in PyTorch's C,H,W order, checked element by element
// against naive indexing; backward is the inverse permutation; ranks 2 and 3 reshape.
#include "nn/flatten.h"

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

TEST(Flatten, NhwcBecomesTorchChwOrder) {
  // Sizes over the 32-wide tile, so tile edges are exercised too.
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{3, 7, 5, 40}, Shape{1, 1, 1, 1}}) {
    const int64_t B = s[0], H = s[1], W = s[2], C = s[3];
    Flatten layer;
    auto cache = layer.make_cache();
    const Tensor x = random_input(s);
    const Tensor& y = layer.forward(x, *cache, ForwardContext());
    ASSERT_EQ(y.shape(), (Shape{B, C * H * W}));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          for (int64_t c = 0; c < C; ++c)
            ASSERT_EQ(y.f32()[b * C * H * W + c * H * W + h * W + w],
                      x.f32()[((b * H + h) * W + w) * C + c])
                << s << " at b=" << b << " h=" << h << " w=" << w << " c=" << c;
  }
}

TEST(Flatten, BackwardInvertsForwardExactly) {
  Flatten layer;
  auto cache = layer.make_cache();
  const Tensor x = random_input({2, 9, 6, 35});
  const Tensor& y = layer.forward(x, *cache, ForwardContext());
  const Tensor& dx = layer.backward(y, *cache, true);
  ASSERT_EQ(dx.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dx.f32()[i], x.f32()[i]) << i;
  EXPECT_FALSE(layer.backward(y, *cache, false).defined());
}

TEST(Flatten, GradientsMatchFiniteDifferences) {
  Flatten layer;
  expect_gradients_match(layer, random_input({2, 3, 4, 5}));
}

TEST(Flatten, LowerRanksReshapeWithoutCopy) {
  Flatten layer;
  auto cache = layer.make_cache();
  const Tensor x2 = random_input({4, 6});
  const Tensor& y2 = layer.forward(x2, *cache, ForwardContext());
  EXPECT_EQ(y2.shape(), (Shape{4, 6}));
  EXPECT_EQ(y2.raw(), x2.raw());
  const Tensor x3 = random_input({4, 3, 5});
  const Tensor& y3 = layer.forward(x3, *cache, ForwardContext());
  EXPECT_EQ(y3.shape(), (Shape{4, 15}));
  EXPECT_EQ(y3.raw(), x3.raw());
  const Tensor dy = random_input({4, 15}, 8);
  const Tensor& dx = layer.backward(dy, *cache, true);
  EXPECT_EQ(dx.shape(), (Shape{4, 3, 5}));
  EXPECT_EQ(dx.raw(), dy.raw());
  // Now a rank-4 input through the same cache must not write into x3 or dy.
  Tensor x3_copy = Tensor::empty(x3.shape()), dy_copy = Tensor::empty(dy.shape());
  x3_copy.copy_from(x3);
  dy_copy.copy_from(dy);
  const Tensor x4 = random_input({4, 1, 3, 5});
  layer.forward(x4, *cache, ForwardContext());
  layer.backward(random_input({4, 15}, 4), *cache, true);
  for (int64_t i = 0; i < x3.numel(); ++i) {
    ASSERT_EQ(x3.f32()[i], x3_copy.f32()[i]) << i;
    ASSERT_EQ(dy.f32()[i], dy_copy.f32()[i]) << i;
  }
}

TEST(Flatten, ZeroBatchKeepsFeatureCount) {
  Flatten layer;
  EXPECT_EQ(layer.output_shape({0, 2, 3, 4}), (Shape{0, 24}));
}

TEST(Flatten, BadRankIsAnErrorNamingTheShape) {
  Flatten layer;
  for (const Shape& s : {Shape{5}, Shape{1, 2, 3, 4, 5}}) {
    try {
      layer.output_shape(s);
      FAIL() << s;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(s.str()), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace braid::nn
