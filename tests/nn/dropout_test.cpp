// Dropout: eval identity, mask statistics, reproducibility per (ctx, layer), gradient =
// mask * scale, finite differences, and bad p.
#include "nn/dropout.h"

#include <cmath>

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

Tensor ones(const Shape& shape) {
  Tensor x = Tensor::empty(shape);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 1.0f;
  return x;
}

ForwardContext train_ctx(uint64_t seed = 42, uint64_t stream = 0) {
  return ForwardContext{Mode::train, Rng(seed, stream)};
}

// Forward in train mode on ones(n): the mask times the scale, as a vector.
std::vector<float> mask_of(Dropout& layer, const ForwardContext& ctx, int64_t n = 1000) {
  auto cache = layer.make_cache();
  const Tensor& y = layer.forward(ones({n}), *cache, ctx);
  return {y.f32(), y.f32() + n};
}

TEST(Dropout, GradientsMatchFiniteDifferences) {
  Dropout layer(0.4f);
  expect_gradients_match(layer, random_input({5, 13}));
}

TEST(Dropout, EvalIsIdentityWithoutCopy) {
  Dropout layer(0.5f);
  auto cache = layer.make_cache();
  const Tensor x = random_input({3, 4});
  const Tensor& y = layer.forward(x, *cache, ForwardContext{Mode::eval, Rng(1)});
  EXPECT_EQ(y.raw(), x.raw());
  EXPECT_EQ(y.shape(), x.shape());
  const Tensor dy = random_input({3, 4}, 9);
  const Tensor& dx = layer.backward(dy, *cache, true);
  EXPECT_EQ(dx.raw(), dy.raw());
}

TEST(Dropout, ZeroProbabilityIsIdentityInTraining) {
  Dropout layer(0.0f);
  auto cache = layer.make_cache();
  const Tensor x = random_input({3, 4});
  EXPECT_EQ(layer.forward(x, *cache, train_ctx()).raw(), x.raw());
}

TEST(Dropout, FractionZeroedIsP) {
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    Dropout layer(p);
    const std::vector<float> y = mask_of(layer, train_ctx(), 100000);
    const float scale = 1.0f / (1.0f - p);
    int64_t zeros = 0;
    for (const float v : y) {
      if (v == 0.0f) {
        ++zeros;
      } else {
        ASSERT_EQ(v, scale) << "survivors are scaled by exactly 1/(1-p)";
      }
    }
    EXPECT_NEAR(static_cast<double>(zeros) / 100000.0, p, 0.01) << "p = " << p;
  }
}

TEST(Dropout, MaskIsAFunctionOfContextAndLayer) {
  Dropout a(0.5f), b(0.5f), c(0.5f);
  ParamSet params;
  a.declare(params, "0.");
  b.declare(params, "0.");
  c.declare(params, "3.");
  const auto ma = mask_of(a, train_ctx());
  EXPECT_EQ(ma, mask_of(a, train_ctx())) << "same ctx, same layer: same mask";
  EXPECT_EQ(ma, mask_of(b, train_ctx())) << "same name in another process: same mask";
  EXPECT_NE(ma, mask_of(c, train_ctx())) << "another layer: another mask";
  EXPECT_NE(ma, mask_of(a, train_ctx(43))) << "another seed: another mask";
  EXPECT_NE(ma, mask_of(a, train_ctx(42, 1))) << "another step stream: another mask";
}

TEST(Dropout, MaskFollowsTheForkedRngStream) {
  // Element i is dropped iff the i-th word of ctx.rng.fork(stream_id) is < p * 2^32; 1003
  // elements end in a partial Philox block of 3.
  Dropout layer(0.25f);
  ParamSet params;
  layer.declare(params, "blocks.2.drop.");
  const ForwardContext ctx = train_ctx(7, 3);
  const std::vector<float> y = mask_of(layer, ctx, 1003);
  Rng words = ctx.rng.fork(layer.stream_id());
  for (size_t i = 0; i < y.size(); ++i) {
    const bool dropped = words.next_u32() < 0x40000000u;  // 0.25 * 2^32
    ASSERT_EQ(y[i] == 0.0f, dropped) << "element " << i;
  }
}

TEST(Dropout, GradientIsMaskTimesScale) {
  Dropout layer(0.3f);
  auto cache = layer.make_cache();
  const Tensor x = ones({7, 11});
  const Tensor& y = layer.forward(x, *cache, train_ctx());
  const Tensor dy = random_input({7, 11}, 5);
  const Tensor& dx = layer.backward(dy, *cache, true);
  const float scale = 1.0f / 0.7f;
  int64_t dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float mask = y.f32()[i] == 0.0f ? 0.0f : 1.0f;
    dropped += mask == 0.0f;
    EXPECT_EQ(dx.f32()[i], dy.f32()[i] * (mask * scale));
  }
  EXPECT_GT(dropped, 0);
  EXPECT_FALSE(layer.backward(dy, *cache, false).defined());
}

TEST(Dropout, TrainingAfterEvalLeavesTheInputAlone) {
  Dropout layer(0.5f);
  auto cache = layer.make_cache();
  const Tensor x = ones({64});
  layer.forward(x, *cache, ForwardContext{Mode::eval, Rng(1)});
  const Tensor dy = ones({64});
  layer.backward(dy, *cache, true);
  const Tensor& y = layer.forward(x, *cache, train_ctx());
  EXPECT_NE(y.raw(), x.raw());
  layer.backward(random_input({64}), *cache, true);
  for (int64_t i = 0; i < 64; ++i) {
    ASSERT_EQ(x.f32()[i], 1.0f) << "train forward wrote into the input at " << i;
    ASSERT_EQ(dy.f32()[i], 1.0f) << "train backward wrote into the old dy at " << i;
  }
}

TEST(Dropout, RejectsBadProbabilityNamingIt) {
  for (const float p : {1.0f, -0.1f, 1.5f, std::nanf("")}) {
    try {
      Dropout layer(p);
      FAIL() << "p = " << p << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("p="), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace braid::nn
