// ReLU, Tanh, Sigmoid: forward against naive double-precision references, backward by
// finite differences, and the cache/shape contracts.
#include "nn/activations.h"

#include <cmath>
#include <limits>

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

// Values pushed at least 0.05 away from ReLU's kink, so a 1e-3 perturbation never crosses it.
Tensor away_from_zero(const Shape& shape) {
  Tensor x = random_input(shape);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += x.f32()[i] >= 0 ? 0.05f : -0.05f;
  return x;
}

template <typename Ref>
void expect_forward_matches(Module& m, const Tensor& x, Ref ref, double tol) {
  auto cache = m.make_cache();
  const Tensor& y = m.forward(x, *cache, ForwardContext());
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(y.f32()[i], ref(static_cast<double>(x.f32()[i])), tol)
        << m.kind() << " at x = " << x.f32()[i];
}

TEST(Activations, GradientsMatchFiniteDifferences) {
  ReLU relu;
  expect_gradients_match(relu, away_from_zero({4, 3, 5}));
  Tanh tanh_layer;
  expect_gradients_match(tanh_layer, random_input({6, 7}));
  Sigmoid sigmoid;
  expect_gradients_match(sigmoid, random_input({2, 3, 2, 4}));
}

TEST(Activations, ForwardMatchesNaiveReference) {
  Tensor x = random_input({5, 33}, 7);  // odd size: vector body plus remainder
  x.f32()[0] = 30.0f;
  x.f32()[1] = -30.0f;
  x.f32()[2] = 0.0f;
  ReLU relu;
  expect_forward_matches(
      relu, x, [](double v) { return v > 0 ? v : 0.0; }, 0.0);
  Tanh tanh_layer;
  expect_forward_matches(
      tanh_layer, x, [](double v) { return std::tanh(v); }, 1e-6);
  Sigmoid sigmoid;
  expect_forward_matches(
      sigmoid, x, [](double v) { return 1 / (1 + std::exp(-v)); }, 1e-6);
}

TEST(Activations, BackwardMatchesClosedForm) {
  const Tensor x = random_input({3, 17}, 11);
  const Tensor dy = random_input({3, 17}, 12);
  auto check = [&](Module& m, auto derivative) {
    auto cache = m.make_cache();
    m.forward(x, *cache, ForwardContext());
    const Tensor& dx = m.backward(dy, *cache, true);
    ASSERT_EQ(dx.shape(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_NEAR(dx.f32()[i], dy.f32()[i] * derivative(static_cast<double>(x.f32()[i])), 1e-5)
          << m.kind() << " at x = " << x.f32()[i];
  };
  ReLU relu;
  check(relu, [](double v) { return v > 0 ? 1.0 : 0.0; });
  Tanh tanh_layer;
  check(tanh_layer, [](double v) { return 1 - std::tanh(v) * std::tanh(v); });
  Sigmoid sigmoid;
  check(sigmoid, [](double v) {
    const double s = 1 / (1 + std::exp(-v));
    return s * (1 - s);
  });
}

TEST(Activations, SaturateWithoutNanAndReluPropagatesNan) {
  Tensor x = Tensor::empty({4});
  x.f32()[0] = -1e4f;
  x.f32()[1] = 1e4f;
  x.f32()[2] = -std::numeric_limits<float>::infinity();
  x.f32()[3] = std::numeric_limits<float>::infinity();
  Sigmoid sigmoid;
  auto c1 = sigmoid.make_cache();
  const Tensor& s = sigmoid.forward(x, *c1, ForwardContext());
  EXPECT_EQ(s.f32()[0], 0.0f);
  EXPECT_EQ(s.f32()[1], 1.0f);
  EXPECT_EQ(s.f32()[2], 0.0f);
  EXPECT_EQ(s.f32()[3], 1.0f);
  Tanh tanh_layer;
  auto c2 = tanh_layer.make_cache();
  const Tensor& t = tanh_layer.forward(x, *c2, ForwardContext());
  EXPECT_EQ(t.f32()[0], -1.0f);
  EXPECT_EQ(t.f32()[1], 1.0f);

  x.f32()[0] = std::numeric_limits<float>::quiet_NaN();
  ReLU relu;
  auto c3 = relu.make_cache();
  EXPECT_TRUE(std::isnan(relu.forward(x, *c3, ForwardContext()).f32()[0]));
}

TEST(Activations, NoDxWhenNotNeededAndShapeErrors) {
  ReLU relu;
  auto cache = relu.make_cache();
  EXPECT_THROW(relu.backward(random_input({2, 3}), *cache, true), Error);  // before forward
  relu.forward(random_input({2, 3}), *cache, ForwardContext());
  EXPECT_FALSE(relu.backward(random_input({2, 3}), *cache, false).defined());
  try {
    relu.backward(random_input({3, 2}), *cache, true);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  }
  Tensor ids = Tensor::empty({4}, DType::i32);
  EXPECT_THROW(relu.forward(ids, *cache, ForwardContext()), Error);
}

TEST(Activations, CacheIsReusedAcrossSteps) {
  Tanh tanh_layer;
  auto cache = tanh_layer.make_cache();
  const Tensor x = random_input({8, 8});
  const float* first = tanh_layer.forward(x, *cache, ForwardContext()).f32();
  const int64_t before = MemoryTracker::process().allocations();
  EXPECT_EQ(tanh_layer.forward(x, *cache, ForwardContext()).f32(), first);
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
}

}  // namespace
}  // namespace braid::nn
