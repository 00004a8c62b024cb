// Nearest-neighbour Upsample on NHWC: a 2x2 image by hand, a naive reference, backward as
// block sums by hand and by finite differences, and the scale/shape errors.
#include "nn/upsample.h"

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

TEST(Upsample, TwoByTwoImageByTwo) {
  Upsample up(2);
  Tensor x = Tensor::empty({1, 2, 2, 1});
  for (int i = 0; i < 4; ++i) x.f32()[i] = static_cast<float>(i + 1);  // [[1, 2], [3, 4]]
  auto cache = up.make_cache();
  const Tensor& y = up.forward(x, *cache, ForwardContext());
  ASSERT_EQ(y.shape(), Shape({1, 4, 4, 1}));
  const float want[16] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y.f32()[i], want[i]) << i;

  Tensor dy = Tensor::empty({1, 4, 4, 1});
  for (int i = 0; i < 16; ++i) dy.f32()[i] = static_cast<float>(i);
  const Tensor& dx = up.backward(dy, *cache, true);
  ASSERT_EQ(dx.shape(), x.shape());
  // Block sums: top-left 0+1+4+5, top-right 2+3+6+7, ...
  const float want_dx[4] = {10, 18, 42, 50};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dx.f32()[i], want_dx[i]) << i;
}

TEST(Upsample, MatchesNaiveReferenceWithChannels) {
  for (int64_t s : {1, 3}) {
    Upsample up(s);
    const Tensor x = random_input({2, 3, 5, 4}, 31);
    auto cache = up.make_cache();
    const Tensor& y = up.forward(x, *cache, ForwardContext());
    ASSERT_EQ(y.shape(), Shape({2, 3 * s, 5 * s, 4}));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t oy = 0; oy < 3 * s; ++oy)
        for (int64_t ox = 0; ox < 5 * s; ++ox)
          for (int64_t c = 0; c < 4; ++c)
            ASSERT_EQ(y.f32()[((b * 3 * s + oy) * 5 * s + ox) * 4 + c],
                      x.f32()[((b * 3 + oy / s) * 5 + ox / s) * 4 + c])
                << "s " << s << " at " << b << ", " << oy << ", " << ox << ", " << c;
  }
}

TEST(Upsample, GradientsMatchFiniteDifferences) {
  Upsample up(3);
  expect_gradients_match(up, random_input({2, 2, 3, 3}, 32));
}

TEST(Upsample, BadScaleAndShapeErrorsNameTheLayer) {
  for (int64_t bad : {0, -2}) {
    try {
      Upsample refused(bad);
      FAIL() << "scale_factor " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Upsample: scale_factor"), std::string::npos)
          << e.what();
    }
  }
  Upsample up(2);
  EXPECT_THROW(up.output_shape(Shape({2, 8})), Error);
  auto cache = up.make_cache();
  EXPECT_THROW(up.backward(random_input({1, 2, 2, 1}), *cache, true), Error);
  up.forward(random_input({1, 2, 2, 1}), *cache, ForwardContext());
  EXPECT_THROW(up.backward(random_input({1, 2, 2, 1}), *cache, true), Error);
  EXPECT_FALSE(up.backward(random_input({1, 4, 4, 1}), *cache, false).defined());
}

}  // namespace
}  // namespace braid::nn
