// Conv2d against finite differences and a naive 7-loop NHWC reference, for both
// algorithms (gemm and direct) and the shapes that reach every kernel branch: padding,
// stride 2, output channels that are not a multiple of 16, rows wider than 8 pixels.
#include "nn/conv2d.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::GradCheckOptions;
using testing::random_input;

struct Config {
  int64_t B, H, W, C, O, k, stride, pad;
  bool bias;
};

// y[b, oy, ox, o] = bias[o] + sum_{c, ky, kx} x[b, iy, ix, c] w[o, c, ky, kx]
Tensor naive_conv(const Config& f, const Tensor& x, const float* w, const float* bias) {
  const int64_t OH = (f.H + 2 * f.pad - f.k) / f.stride + 1;
  const int64_t OW = (f.W + 2 * f.pad - f.k) / f.stride + 1;
  Tensor y = Tensor::empty({f.B, OH, OW, f.O});
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox)
        for (int64_t o = 0; o < f.O; ++o) {
          double s = bias ? bias[o] : 0.0;
          for (int64_t c = 0; c < f.C; ++c)
            for (int64_t ky = 0; ky < f.k; ++ky)
              for (int64_t kx = 0; kx < f.k; ++kx) {
                const int64_t iy = oy * f.stride - f.pad + ky, ix = ox * f.stride - f.pad + kx;
                if (iy < 0 || iy >= f.H || ix < 0 || ix >= f.W) continue;
                s += static_cast<double>(x.f32()[((b * f.H + iy) * f.W + ix) * f.C + c]) *
                     w[((o * f.C + c) * f.k + ky) * f.k + kx];
              }
          y.f32()[((b * OH + oy) * OW + ox) * f.O + o] = static_cast<float>(s);
        }
  return y;
}

// A declared, initialised layer with its own parameters.
struct Layer {
  Conv2d conv;
  ParamSet params;
  Layer(const Config& f, Conv2d::Algorithm a) : conv(f.C, f.O, f.k, f.stride, f.pad, f.bias) {
    conv.set_algorithm(a);
    conv.declare(params, "conv.");
    params.allocate();
    Rng rng(11);
    conv.init(rng);
  }
};

const Config kConfigs[] = {
    {2, 10, 11, 1, 32, 3, 1, 0, true},  // first layer of the cnn model: direct path
    {2, 9, 12, 1, 18, 3, 1, 1, true},   // padding, 16 + 2 output channels
    {3, 7, 8, 3, 5, 3, 2, 1, true},     // stride 2, few output channels
    {2, 6, 6, 8, 20, 3, 1, 1, false},   // 72 taps: gemm path, no bias
    {1, 9, 10, 4, 16, 2, 2, 0, true},   // even kernel, stride 2, odd width
    {2, 5, 5, 2, 7, 5, 1, 2, true},     // kernel as large as the image
    {1, 4, 9, 2, 16, 3, 1, 0, true},    // 7 output columns: 6 + 1 pixel blocks
    {1, 4, 11, 2, 16, 3, 1, 0, true},   // 9 output columns: 6 + 2 + 1 pixel blocks
    {1, 5, 9, 16, 18, 3, 1, 2, false},  // 16 input channels, padding 2
};

TEST(Conv2d, ForwardMatchesNaiveLoopsForBothAlgorithms) {
  for (const Config& f : kConfigs) {
    for (auto algo : {Conv2d::Algorithm::gemm, Conv2d::Algorithm::direct}) {
      Layer l(f, algo);
      Tensor x = random_input({f.B, f.H, f.W, f.C});
      auto cache = l.conv.make_cache();
      const Tensor& y = l.conv.forward(x, *cache, ForwardContext());
      const Tensor ref =
          naive_conv(f, x, l.params.param(0).f32(), f.bias ? l.params.param(1).f32() : nullptr);
      ASSERT_EQ(y.shape(), ref.shape());
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_NEAR(y.f32()[i], ref.f32()[i], 1e-4)
            << "C=" << f.C << " O=" << f.O << " k=" << f.k
            << " direct=" << (algo == Conv2d::Algorithm::direct) << " at " << i;
    }
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  for (const Config& f : kConfigs) {
    for (auto algo : {Conv2d::Algorithm::gemm, Conv2d::Algorithm::direct}) {
      SCOPED_TRACE(::testing::Message()
                   << "C=" << f.C << " O=" << f.O << " k=" << f.k << " stride=" << f.stride
                   << " pad=" << f.pad << " direct=" << (algo == Conv2d::Algorithm::direct));
      Conv2d conv(f.C, f.O, f.k, f.stride, f.pad, f.bias);
      conv.set_algorithm(algo);
      GradCheckOptions opt;
      opt.max_checks = 24;
      expect_gradients_match(conv, random_input({f.B, f.H, f.W, f.C}), opt);
    }
  }
}

TEST(Conv2d, AlgorithmsAgreeOnWeightGradientsWithoutDx) {
  // Every weight compared, not sampled: tap counts 9, 18 and 27 reach each tap-block
  // size of the direct weight-gradient kernel, widths 7, 10, 21 each pixel-block size,
  // 35 and 16 output channels the vector and tail paths.
  const Config configs[] = {{3, 12, 21, 2, 35, 3, 1, 1, true},
                            {2, 9, 9, 1, 16, 3, 1, 0, true},
                            {2, 8, 10, 3, 33, 3, 1, 1, true}};
  for (const Config& f : configs) {
    Layer gemm(f, Conv2d::Algorithm::gemm), direct(f, Conv2d::Algorithm::direct);
    Tensor x = random_input({f.B, f.H, f.W, f.C});
    Tensor dy = random_input(gemm.conv.output_shape(x.shape()), 9);
    for (Layer* l : {&gemm, &direct}) {
      auto cache = l->conv.make_cache();
      l->conv.forward(x, *cache, ForwardContext());
      l->params.zero_grads();
      EXPECT_FALSE(l->conv.backward(dy, *cache, /*need_dx=*/false).defined());
    }
    for (int64_t i = 0; i < gemm.params.size(); ++i)
      ASSERT_NEAR(gemm.params.grads()[i], direct.params.grads()[i],
                  1e-4 * std::max(1.0f, std::fabs(gemm.params.grads()[i])))
          << "C=" << f.C << " O=" << f.O << " at " << i;
  }
}

TEST(Conv2d, SteadyStateStepAllocatesNothing) {
  for (auto algo : {Conv2d::Algorithm::gemm, Conv2d::Algorithm::direct}) {
    Layer l({2, 6, 7, 3, 16, 3, 1, 1, true}, algo);
    Tensor x = random_input({2, 6, 7, 3});
    Tensor dy = random_input({2, 6, 7, 16}, 9);
    auto cache = l.conv.make_cache();
    auto step = [&] {
      l.conv.forward(x, *cache, ForwardContext());
      l.conv.backward(dy, *cache, true);
    };
    step();
    const int64_t before = MemoryTracker::process().allocations();
    step();
    EXPECT_EQ(MemoryTracker::process().allocations(), before);
  }
}

// Automatic: the first forward of a geometry times both algorithms and records the faster;
// its output is bitwise that algorithm's; a forced policy times nothing.
TEST(Conv2d, AutomaticMeasuresEachGeometryOnceAndRunsTheFaster) {
  clear_conv_choices();
  for (const Config& f : {kConfigs[0], kConfigs[3]}) {
    Layer automatic(f, Conv2d::Algorithm::automatic);
    const Tensor x = random_input({f.B, f.H, f.W, f.C});
    auto cache = automatic.conv.make_cache();
    const Tensor& y = automatic.conv.forward(x, *cache, ForwardContext());
    ConvGeometry g;
    g.B = f.B, g.H = f.H, g.W = f.W, g.C = f.C, g.O = f.O, g.k = f.k, g.stride = f.stride,
    g.pad = f.pad;
    const std::optional<ConvChoice> choice = find_conv_choice(g, Precision::fp32);
    ASSERT_TRUE(choice.has_value());
    EXPECT_GT(choice->gemm_s, 0);
    EXPECT_GT(choice->direct_s, 0);
    EXPECT_EQ(choice->direct, choice->direct_s < choice->gemm_s);
    Layer forced(f, choice->direct ? Conv2d::Algorithm::direct : Conv2d::Algorithm::gemm);
    auto forced_cache = forced.conv.make_cache();
    const Tensor& expected = forced.conv.forward(x, *forced_cache, ForwardContext());
    ASSERT_EQ(y.numel(), expected.numel());
    EXPECT_TRUE(std::equal(y.f32(), y.f32() + y.numel(), expected.f32()));
  }
  EXPECT_EQ(conv_choices().size(), 2u);
  clear_conv_choices();
  set_conv_policy(ConvPolicy::direct);
  Layer l(kConfigs[3], Conv2d::Algorithm::automatic);
  auto cache = l.conv.make_cache();
  l.conv.forward(random_input({2, 6, 6, 8}), *cache, ForwardContext());
  set_conv_policy(ConvPolicy::automatic);
  EXPECT_TRUE(conv_choices().empty());
}

// Under OnMiss::rule a new geometry takes the fixed rule (direct below 32 taps) with
// nothing timed; under rule_and_measure it takes the rule too, and its timing is kept.
TEST(Conv2d, TheRuleDecidesWhereRanksMustAgree) {
  for (const OnMiss policy : {OnMiss::rule, OnMiss::rule_and_measure}) {
    clear_conv_choices();
    set_on_miss(policy);
    for (const Config& f : {kConfigs[0], kConfigs[3]}) {
      Layer automatic(f, Conv2d::Algorithm::automatic);
      auto cache = automatic.conv.make_cache();
      automatic.conv.forward(random_input({f.B, f.H, f.W, f.C}), *cache, ForwardContext());
    }
    set_on_miss(OnMiss::measure);
    const std::vector<ConvChoice> used = conv_choices();
    ASSERT_EQ(used.size(), 2u);
    for (const ConvChoice& c : used) {
      EXPECT_EQ(c.origin, ChoiceOrigin::rule);
      EXPECT_EQ(c.direct, c.geometry.taps() < kRuleDirectMaxTaps) << describe(c.geometry);
      EXPECT_EQ(c.gemm_s, 0);
    }
    const std::vector<ConvChoice> timed = conv_measurements();
    EXPECT_EQ(timed.size(), policy == OnMiss::rule ? 0u : 2u);
    for (const ConvChoice& c : timed) EXPECT_GT(c.gemm_s, 0);
  }
  clear_conv_choices();
}

TEST(Conv2d, ParametersUsePyTorchLayoutAndInit) {
  Layer l({1, 5, 5, 3, 4, 3, 1, 0, true}, Conv2d::Algorithm::automatic);
  ASSERT_EQ(l.params.layout().size(), 2u);
  EXPECT_EQ(l.params.info(0).name, "conv.weight");
  EXPECT_EQ(l.params.info(0).shape, Shape({4, 3, 3, 3}));
  EXPECT_TRUE(l.params.info(0).decay);
  EXPECT_EQ(l.params.info(1).name, "conv.bias");
  EXPECT_EQ(l.params.info(1).shape, Shape({4}));
  EXPECT_FALSE(l.params.info(1).decay);
  const float bound = 1.0f / std::sqrt(27.0f);
  float wmax = 0;
  for (size_t id = 0; id < 2; ++id) {
    Tensor p = l.params.param(id);
    for (int64_t i = 0; i < p.numel(); ++i) wmax = std::max(wmax, std::fabs(p.f32()[i]));
  }
  EXPECT_LE(wmax, bound);
  EXPECT_GT(wmax, 0.5f * bound);
  EXPECT_DOUBLE_EQ(l.conv.forward_flops({2, 5, 5, 3}), 2.0 * 2 * 3 * 3 * 4 * 27);
}

std::string error_of(const Conv2d& conv, const Shape& in) {
  try {
    conv.output_shape(in);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Conv2d, ShapeErrorsNameBothShapes) {
  const std::string wrong_channels = error_of(Conv2d(1, 32, 3), {4, 28, 28, 3});
  EXPECT_NE(wrong_channels.find("[4, 28, 28, 3]"), std::string::npos) << wrong_channels;
  EXPECT_NE(wrong_channels.find("[B, H, W, 1]"), std::string::npos) << wrong_channels;
  const std::string too_small = error_of(Conv2d(1, 8, 5, 1, 1), {2, 2, 9, 1});
  EXPECT_NE(too_small.find("[2, 2, 9, 1]"), std::string::npos) << too_small;
  EXPECT_NE(too_small.find("5x5"), std::string::npos) << too_small;
  EXPECT_NE(error_of(Conv2d(1, 8, 3), {28, 28, 1}).find("[28, 28, 1]"), std::string::npos);
  EXPECT_THROW(Conv2d(1, 8, 0), Error);
}

}  // namespace
}  // namespace braid::nn
