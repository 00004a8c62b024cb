// ReLU, Tanh, Sigmoid, LeakyReLU, SiLU: forward against naive double-precision references, backward
// by finite differences, and the cache/shape contracts.
#include "nn/activations.h"

#include <algorithm>
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

TEST(LeakyRelu, GradientsMatchFiniteDifferences) {
  for (float slope : {0.01f, 0.2f, 0.0f, 1.5f}) {
    SCOPED_TRACE(slope);
    LeakyReLU leaky(slope);
    expect_gradients_match(leaky, away_from_zero({4, 3, 5}));
  }
}

TEST(LeakyRelu, ForwardAndBackwardByHand) {
  LeakyReLU leaky;  // PyTorch's default slope, 0.01
  EXPECT_FLOAT_EQ(leaky.negative_slope(), 0.01f);
  Tensor x = Tensor::empty({5});
  const float in[] = {-2.0f, -0.5f, 0.0f, 0.5f, 3.0f};
  std::copy(in, in + 5, x.f32());
  auto cache = leaky.make_cache();
  const Tensor& y = leaky.forward(x, *cache, ForwardContext());
  const float want[] = {-0.02f, -0.005f, 0.0f, 0.5f, 3.0f};
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(y.f32()[i], want[i]) << "x = " << in[i];
  Tensor dy = Tensor::empty({5});
  std::fill(dy.f32(), dy.f32() + 5, 2.0f);
  const Tensor& dx = leaky.backward(dy, *cache, true);
  // x == 0 takes the negative side's slope, as torch's leaky_relu_backward (x > 0 ? dy : ...).
  const float want_dx[] = {0.02f, 0.02f, 0.02f, 2.0f, 2.0f};
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(dx.f32()[i], want_dx[i]) << "x = " << in[i];
}

TEST(LeakyRelu, SlopeZeroIsReluAndNegativeSlopesAreRefused) {
  const Tensor x = random_input({7, 9}, 21);
  const Tensor dy = random_input({7, 9}, 22);
  LeakyReLU leaky(0.0f);
  ReLU relu;
  auto cl = leaky.make_cache();
  auto cr = relu.make_cache();
  const Tensor& yl = leaky.forward(x, *cl, ForwardContext());
  const Tensor& yr = relu.forward(x, *cr, ForwardContext());
  const Tensor& dl = leaky.backward(dy, *cl, true);
  const Tensor& dr = relu.backward(dy, *cr, true);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(yl.f32()[i], yr.f32()[i]) << i;
    EXPECT_EQ(dl.f32()[i], dr.f32()[i]) << i;
  }
  for (float bad :
       {-0.1f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    try {
      LeakyReLU refused(bad);
      FAIL() << "slope " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("LeakyReLU: negative_slope"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Silu, GradientsMatchFiniteDifferences) {
  SiLU silu;
  Tensor x = random_input({3, 4, 6}, 5);
  x.f32()[0] = 6.0f;  // into both tails
  x.f32()[1] = -6.0f;
  expect_gradients_match(silu, x);
}

TEST(Silu, ForwardAndBackwardMatchReference) {
  Tensor x = random_input({5, 33}, 13);
  x.f32()[0] = 0.0f;
  x.f32()[1] = 1.0f;
  x.f32()[2] = -1e4f;  // exp(1e4) overflows: y = -0, dy/dx = 0, no NaN
  x.f32()[3] = 1e4f;
  SiLU silu;
  expect_forward_matches(
      silu, x, [](double v) { return v / (1 + std::exp(-v)); }, 1e-6);
  auto cache = silu.make_cache();
  const Tensor& y = silu.forward(x, *cache, ForwardContext());
  EXPECT_EQ(y.f32()[0], 0.0f);
  EXPECT_NEAR(y.f32()[1], 0.7310585786, 1e-6);  // 1 * sigmoid(1)
  const Tensor dy = random_input({5, 33}, 14);
  const Tensor& dx = silu.backward(dy, *cache, true);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.f32()[i], s = 1 / (1 + std::exp(-v));
    EXPECT_NEAR(dx.f32()[i], dy.f32()[i] * (s + v * s * (1 - s)), 1e-5) << "x = " << v;
  }
  EXPECT_FLOAT_EQ(dx.f32()[0], 0.5f * dy.f32()[0]);  // silu'(0) = 1/2
  EXPECT_EQ(dx.f32()[2], 0.0f);
  EXPECT_FLOAT_EQ(dx.f32()[3], dy.f32()[3]);
  EXPECT_FALSE(silu.backward(dy, *cache, false).defined());
  auto fresh = silu.make_cache();
  EXPECT_THROW(silu.backward(dy, *fresh, true), Error);  // before forward
}

}  // namespace
}  // namespace braid::nn
