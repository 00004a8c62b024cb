// Softmax over the last dimension: hand-computed values, rows summing to 1, no overflow on
// huge inputs, backward by its closed form and by finite differences.
#include "nn/softmax.h"

#include <cmath>
#include <limits>

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

TEST(Softmax, OfOneTwoThreeByHand) {
  Softmax softmax;
  Tensor x = Tensor::empty({1, 3});
  x.f32()[0] = 1.0f;
  x.f32()[1] = 2.0f;
  x.f32()[2] = 3.0f;
  auto cache = softmax.make_cache();
  const Tensor& y = softmax.forward(x, *cache, ForwardContext());
  // e^k / (e + e^2 + e^3)
  EXPECT_NEAR(y.f32()[0], 0.09003057317, 1e-7);
  EXPECT_NEAR(y.f32()[1], 0.24472847105, 1e-7);
  EXPECT_NEAR(y.f32()[2], 0.66524095577, 1e-7);
}

TEST(Softmax, RowsSumToOneAndMatchReference) {
  Softmax softmax;
  const Tensor x = random_input({3, 4, 37}, 17);  // rank 3: softmax per (batch, time) row
  auto cache = softmax.make_cache();
  const Tensor& y = softmax.forward(x, *cache, ForwardContext());
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t r = 0; r < 12; ++r) {
    const float* xr = x.f32() + r * 37;
    double denom = 0, sum = 0;
    for (int i = 0; i < 37; ++i) denom += std::exp(static_cast<double>(xr[i]));
    for (int i = 0; i < 37; ++i) {
      sum += y.f32()[r * 37 + i];
      EXPECT_NEAR(y.f32()[r * 37 + i], std::exp(static_cast<double>(xr[i])) / denom, 1e-6);
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
}

TEST(Softmax, HugeInputsDoNotOverflow) {
  Softmax softmax;
  Tensor x = Tensor::empty({2, 3});
  // exp(1000) is inf in float and double: without the max shift this row is NaN.
  const float in[] = {1000.0f, 1001.0f, 1002.0f, -1e30f, 0.0f, 1e30f};
  std::copy(in, in + 6, x.f32());
  auto cache = softmax.make_cache();
  const Tensor& y = softmax.forward(x, *cache, ForwardContext());
  EXPECT_NEAR(y.f32()[0], 0.09003057317, 1e-7);  // shift-invariant: as [1, 2, 3]
  EXPECT_NEAR(y.f32()[2], 0.66524095577, 1e-7);
  EXPECT_EQ(y.f32()[3], 0.0f);
  EXPECT_EQ(y.f32()[4], 0.0f);
  EXPECT_EQ(y.f32()[5], 1.0f);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(y.f32()[i])) << i;
}

TEST(Softmax, BackwardMatchesClosedFormAndFiniteDifferences) {
  Softmax softmax;
  const Tensor x = random_input({5, 9}, 23);
  const Tensor dy = random_input({5, 9}, 24);
  auto cache = softmax.make_cache();
  const Tensor& y = softmax.forward(x, *cache, ForwardContext());
  const Tensor& dx = softmax.backward(dy, *cache, true);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t i = 0; i < 9; ++i) {
      // dx_i = sum_j dy_j * dy_j/dx_i, with dy_j/dx_i = y_j (delta_ij - y_i).
      double want = 0;
      for (int64_t j = 0; j < 9; ++j) {
        const double yi = y.f32()[r * 9 + i], yj = y.f32()[r * 9 + j];
        want += dy.f32()[r * 9 + j] * yj * ((i == j ? 1.0 : 0.0) - yi);
      }
      EXPECT_NEAR(dx.f32()[r * 9 + i], want, 1e-6) << r << ", " << i;
    }
  // Each row of dx sums to 0: softmax ignores a shift of its input.
  for (int64_t r = 0; r < 5; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < 9; ++i) sum += dx.f32()[r * 9 + i];
    EXPECT_NEAR(sum, 0.0, 1e-6);
  }
  EXPECT_FALSE(softmax.backward(dy, *cache, false).defined());

  Softmax fresh;
  expect_gradients_match(fresh, random_input({4, 3, 11}, 25));
}

TEST(Softmax, ShapeErrors) {
  Softmax softmax;
  auto cache = softmax.make_cache();
  EXPECT_THROW(softmax.backward(random_input({2, 3}), *cache, true), Error);  // before forward
  softmax.forward(random_input({2, 3}), *cache, ForwardContext());
  EXPECT_THROW(softmax.backward(random_input({3, 2}), *cache, true), Error);
  EXPECT_THROW(softmax.output_shape(Shape({2, 0})), Error);
}

}  // namespace
}  // namespace braid::nn
