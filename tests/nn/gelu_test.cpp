#include "nn/gelu.h"

#include <cmath>

#include "gradcheck.h"
#include "nn/fast_math.h"

namespace braid::nn {
namespace {

// Default-initialised: `{}` would copy-list-initialise Rng through its explicit constructor.
const ForwardContext kCtx;

using testing::expect_gradients_match;
using testing::random_input;

double gelu_reference(double x, GeluApprox approx) {
  if (approx == GeluApprox::none) return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ExactGradientsMatchFiniteDifferences) {
  Gelu layer(GeluApprox::none);
  expect_gradients_match(layer, random_input({3, 37}));
}

TEST(Gelu, TanhGradientsMatchFiniteDifferences) {
  Gelu layer(GeluApprox::tanh);
  expect_gradients_match(layer, random_input({2, 3, 41}));
}

TEST(Gelu, ForwardMatchesFormulaOverWideRangeInEveryBuild) {
  using fast_math::Isa;
  for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (fast_math::detected_isa() < isa) continue;
    fast_math::isa_limit = isa;
    for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
      Gelu layer(approx);
      Tensor x = Tensor::empty({1001});
      for (int i = 0; i < 1001; ++i) x.f32()[i] = -12.0f + 0.024f * static_cast<float>(i);
      auto cache = layer.make_cache();
      const Tensor& y = layer.forward(x, *cache, kCtx);
      for (int i = 0; i < 1001; ++i) {
        const double ref = gelu_reference(x.f32()[i], approx);
        ASSERT_NEAR(y.f32()[i], ref, 2e-6 * std::max(1.0, std::fabs(ref)))
            << "x=" << x.f32()[i] << " isa " << static_cast<int>(isa);
      }
    }
    Gelu layer(GeluApprox::tanh);
    expect_gradients_match(layer, random_input({2, 37}));
  }
  fast_math::isa_limit = Isa::avx512;
}

TEST(Gelu, BackwardMatchesAnalyticDerivativeFarOut) {
  // Saturated inputs: the derivative tends to 0 (left) and 1 (right), never NaN.
  Gelu layer(GeluApprox::tanh);
  Tensor x = Tensor::empty({4});
  const float xs[4] = {-50.0f, -9.0f, 9.0f, 50.0f};
  for (int i = 0; i < 4; ++i) x.f32()[i] = xs[i];
  Tensor dy = Tensor::empty({4});
  for (int i = 0; i < 4; ++i) dy.f32()[i] = 1.0f;
  auto cache = layer.make_cache();
  layer.forward(x, *cache, kCtx);
  const Tensor& dx = layer.backward(dy, *cache, true);
  EXPECT_NEAR(dx.f32()[0], 0.0f, 1e-6);
  EXPECT_NEAR(dx.f32()[1], 0.0f, 1e-6);
  EXPECT_NEAR(dx.f32()[2], 1.0f, 1e-6);
  EXPECT_NEAR(dx.f32()[3], 1.0f, 1e-6);
}

}  // namespace
}  // namespace braid::nn
