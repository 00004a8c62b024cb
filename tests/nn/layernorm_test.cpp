#include "nn/layernorm.h"

#include <cmath>
#include <string>

#include "gradcheck.h"
#include "nn/fast_math.h"

namespace braid::nn {
namespace {

// Default-initialised: `{}` would copy-list-initialise Rng through its explicit constructor.
const ForwardContext kCtx;

using testing::expect_gradients_match;
using testing::random_input;

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  LayerNorm layer(19);
  expect_gradients_match(layer, random_input({2, 3, 19}));
}

TEST(LayerNorm, GradientsMatchWithVectorWidthRowsInEveryBuild) {
  using fast_math::Isa;
  for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (fast_math::detected_isa() < isa) continue;
    SCOPED_TRACE("isa " + std::to_string(static_cast<int>(isa)));
    fast_math::isa_limit = isa;
    LayerNorm layer(40);
    expect_gradients_match(layer, random_input({5, 40}, 7));
  }
  fast_math::isa_limit = Isa::avx512;
}

TEST(LayerNorm, ForwardMatchesNaiveAndDeclaresNoDecay) {
  const int64_t rows = 4, dim = 21;
  LayerNorm layer(dim);
  ParamSet params;
  layer.declare(params, "ln.");
  params.allocate();
  Rng rng(2);
  layer.init(rng);
  EXPECT_EQ(params.layout()[0].name, "ln.weight");
  EXPECT_EQ(params.layout()[1].name, "ln.bias");
  EXPECT_FALSE(params.layout()[0].decay);
  EXPECT_FALSE(params.layout()[1].decay);
  EXPECT_EQ(params.param(0).f32()[3], 1.0f);
  EXPECT_EQ(params.param(1).f32()[3], 0.0f);
  float* w = params.param(0).f32();
  float* b = params.param(1).f32();
  for (int64_t j = 0; j < dim; ++j) {
    w[j] = 0.5f + 0.1f * static_cast<float>(j);
    b[j] = -0.2f * static_cast<float>(j);
  }
  Tensor x = random_input({rows, dim});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += 100.0f;  // large mean: tests stability
  auto cache = layer.make_cache();
  const Tensor& y = layer.forward(x, *cache, kCtx);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < dim; ++j) mean += x.f32()[r * dim + j];
    mean /= dim;
    for (int64_t j = 0; j < dim; ++j) var += std::pow(x.f32()[r * dim + j] - mean, 2);
    var /= dim;
    for (int64_t j = 0; j < dim; ++j) {
      const double ref = (x.f32()[r * dim + j] - mean) / std::sqrt(var + 1e-5) * w[j] + b[j];
      EXPECT_NEAR(y.f32()[r * dim + j], ref, 2e-4) << r << "," << j;
    }
  }
}

TEST(LayerNorm, WrongWidthIsAnError) {
  LayerNorm layer(8);
  EXPECT_THROW(layer.output_shape({4, 7}), Error);
}

}  // namespace
}  // namespace braid::nn
