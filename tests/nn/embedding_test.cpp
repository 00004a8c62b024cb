#include "nn/embedding.h"

#include "gradcheck.h"

namespace braid::nn {
namespace {

// Default-initialised: `{}` would copy-list-initialise Rng through its explicit constructor.
const ForwardContext kCtx;

using testing::expect_gradients_match;
using testing::GradCheckOptions;

Tensor ids(const Shape& shape, std::initializer_list<int32_t> values) {
  Tensor t = Tensor::empty(shape, DType::i32);
  int64_t i = 0;
  for (int32_t v : values) t.data<int32_t>()[i++] = v;
  return t;
}

TEST(Embedding, GradientsMatchFiniteDifferences) {
  Embedding layer(7, 5);
  GradCheckOptions opt;
  opt.check_input = false;
  // Repeated ids: the scatter-add must accumulate, not overwrite.
  expect_gradients_match(layer, ids({2, 3}, {1, 4, 1, 6, 0, 4}), opt);
}

TEST(Embedding, ForwardGathersRowsAndBackwardScatterAdds) {
  Embedding layer(4, 3);
  ParamSet params;
  layer.declare(params, "wte.");
  params.allocate();
  Rng rng(1);
  layer.init(rng);
  EXPECT_EQ(params.layout()[0].name, "wte.weight");
  EXPECT_EQ(params.layout()[0].shape, Shape({4, 3}));
  EXPECT_TRUE(params.layout()[0].decay);
  const float* w = params.param(0).f32();
  Tensor x = ids({3}, {2, 0, 2});
  auto cache = layer.make_cache();
  const Tensor& y = layer.forward(x, *cache, kCtx);
  ASSERT_EQ(y.shape(), Shape({3, 3}));
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(y.f32()[0 * 3 + j], w[2 * 3 + j]);
    EXPECT_EQ(y.f32()[1 * 3 + j], w[0 * 3 + j]);
    EXPECT_EQ(y.f32()[2 * 3 + j], w[2 * 3 + j]);
  }
  Tensor dy = Tensor::empty({3, 3});
  for (int i = 0; i < 9; ++i) dy.f32()[i] = static_cast<float>(i + 1);
  params.zero_grads();
  params.grad(0).f32()[0] = 10.0f;  // backward adds to what is there
  EXPECT_FALSE(layer.backward(dy, *cache, false).defined());
  const float* g = params.grad(0).f32();
  EXPECT_EQ(g[0], 10.0f + 4.0f);
  EXPECT_EQ(g[2 * 3 + 1], 2.0f + 8.0f);
  EXPECT_EQ(g[1 * 3 + 0], 0.0f);
  EXPECT_EQ(g[3 * 3 + 2], 0.0f);
}

TEST(Embedding, OutOfRangeIdNamesPositionIdAndSize) {
  Embedding layer(10, 2);
  ParamSet params;
  layer.declare(params, "");
  params.allocate();
  auto cache = layer.make_cache();
  for (int32_t bad : {10, -1}) {
    try {
      layer.forward(ids({2, 2}, {0, 3, bad, 1}), *cache, kCtx);
      FAIL() << "id " << bad << " accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("id " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("position 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
    }
  }
}

TEST(Embedding, RejectsFloatInputAndInputGradient) {
  Embedding layer(10, 2);
  ParamSet params;
  layer.declare(params, "");
  params.allocate();
  auto cache = layer.make_cache();
  EXPECT_THROW(layer.forward(Tensor::empty({2}), *cache, kCtx), Error);
  Tensor x = ids({2}, {1, 2});
  layer.forward(x, *cache, kCtx);
  try {
    layer.backward(Tensor::empty({2, 2}), *cache, true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("integer ids"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::nn
