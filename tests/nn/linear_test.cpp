#include "nn/linear.h"

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

TEST(Linear, GradientsMatchFiniteDifferences) {
  Linear layer(7, 5);
  expect_gradients_match(layer, random_input({3, 7}));
}

TEST(Linear, AcceptsLeadingDimensionsAndNoBias) {
  Linear layer(4, 6, /*bias=*/false);
  expect_gradients_match(layer, random_input({2, 3, 4}));
}

TEST(Linear, ForwardMatchesNaiveProduct) {
  Linear layer(3, 2);
  ParamSet params;
  layer.declare(params, "fc.");
  params.allocate();
  Rng rng(5);
  layer.init(rng);
  EXPECT_EQ(params.layout()[0].name, "fc.weight");
  EXPECT_EQ(params.layout()[1].name, "fc.bias");
  EXPECT_FALSE(params.layout()[1].decay);
  Tensor x = random_input({4, 3});
  auto cache = layer.make_cache();
  const Tensor& y = layer.forward(x, *cache, ForwardContext());
  const float* w = params.param(0).f32();
  const float* b = params.param(1).f32();
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 2; ++o) {
      float ref = b[o];
      for (int i = 0; i < 3; ++i) ref += x.f32()[r * 3 + i] * w[o * 3 + i];
      EXPECT_NEAR(y.f32()[r * 2 + o], ref, 1e-5);
    }
}

TEST(Linear, WrongInputShapeNamesBothShapes) {
  Linear layer(3, 2);
  try {
    layer.output_shape({4, 5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::nn
