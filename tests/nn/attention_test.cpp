#include "nn/attention.h"

#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "nn/fast_math.h"

namespace braid::nn {
namespace {

// Default-initialised: `{}` would copy-list-initialise Rng through its explicit constructor.
const ForwardContext kCtx;

using testing::expect_gradients_match;
using testing::random_input;

TEST(CausalSelfAttention, GradientsMatchFiniteDifferences) {
  CausalSelfAttention layer(8, 2);
  expect_gradients_match(layer, random_input({2, 5, 8}));
}

TEST(CausalSelfAttention, GradientsMatchForVectorHeadWidths) {
  // Head widths 32 (two 16-column register tiles), 24 (16 + 8) and 12 (8 + scalar tail);
  // lengths that are not multiples of the 4-row tile or the 16-column padding.
  struct Case {
    int64_t D, H, T;
  };
  for (const Case& c : {Case{64, 2, 21}, Case{48, 2, 9}, Case{24, 2, 18}}) {
    SCOPED_TRACE("D=" + std::to_string(c.D) + " T=" + std::to_string(c.T));
    CausalSelfAttention layer(c.D, c.H);
    testing::GradCheckOptions opt;
    opt.max_checks = 24;
    expect_gradients_match(layer, random_input({2, c.T, c.D}, 5), opt);
  }
}

TEST(CausalSelfAttention, GradientsMatchOverLongSequence) {
  CausalSelfAttention layer(8, 2);
  testing::GradCheckOptions opt;
  opt.max_checks = 24;
  expect_gradients_match(layer, random_input({1, 70, 8}, 5), opt);
}

// Naive attention in double from the layer's parameters: y[b, t] for every position.
std::vector<double> naive_attention(const ParamSet& params, const Tensor& x, int64_t H) {
  const int64_t B = x.dim(0), T = x.dim(1), D = x.dim(2), hd = D / H;
  const float* wa = params.param(0).f32();  // [3D, D]
  const float* ba = params.param(1).f32();
  const float* wp = params.param(2).f32();  // [D, D]
  const float* bp = params.param(3).f32();
  std::vector<double> qkv(B * T * 3 * D), y(B * T * D, 0.0), out(B * T * D);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < 3 * D; ++o) {
      double s = ba[o];
      for (int64_t i = 0; i < D; ++i) s += double(x.f32()[r * D + i]) * wa[o * D + i];
      qkv[r * 3 * D + o] = s;
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(t + 1);
        double m = -1e300, z = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot +=
                qkv[(b * T + t) * 3 * D + h * hd + d] * qkv[(b * T + s) * 3 * D + D + h * hd + d];
          p[s] = dot / std::sqrt(double(hd));
          m = std::max(m, p[s]);
        }
        for (auto& v : p) z += (v = std::exp(v - m));
        for (int64_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (int64_t s = 0; s <= t; ++s)
            acc += p[s] / z * qkv[(b * T + s) * 3 * D + 2 * D + h * hd + d];
          y[(b * T + t) * D + h * hd + d] = acc;
        }
      }
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < D; ++o) {
      double s = bp[o];
      for (int64_t i = 0; i < D; ++i) s += y[r * D + i] * wp[o * D + i];
      out[r * D + o] = s;
    }
  return out;
}

TEST(CausalSelfAttention, ForwardMatchesNaiveReference) {
  struct Case {
    int64_t B, T, D, H;
  };
  for (const Case& c : {Case{2, 40, 16, 4}, Case{2, 37, 64, 2}, Case{1, 130, 128, 4},
                        Case{3, 21, 48, 2}, Case{1, 19, 24, 2}, Case{2, 1, 8, 1}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " D=" + std::to_string(c.D) +
                 " H=" + std::to_string(c.H));
    CausalSelfAttention layer(c.D, c.H);
    ParamSet params;
    layer.declare(params, "attn.");
    params.allocate();
    Rng rng(4);
    layer.init(rng);
    Tensor x = random_input({c.B, c.T, c.D}, 9);
    auto cache = layer.make_cache();
    const Tensor& y = layer.forward(x, *cache, kCtx);
    const std::vector<double> ref = naive_attention(params, x, c.H);
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.f32()[i], ref[i], 2e-5) << i;
  }
}

TEST(CausalSelfAttention, DeclaresGpt2Names) {
  const int64_t D = 16;
  CausalSelfAttention layer(D, 4);
  ParamSet params;
  layer.declare(params, "attn.");
  ASSERT_EQ(params.layout().size(), 4u);
  EXPECT_EQ(params.layout()[0].name, "attn.c_attn.weight");
  EXPECT_EQ(params.layout()[0].shape, Shape({3 * D, D}));
  EXPECT_EQ(params.layout()[1].name, "attn.c_attn.bias");
  EXPECT_EQ(params.layout()[2].name, "attn.c_proj.weight");
  EXPECT_EQ(params.layout()[2].shape, Shape({D, D}));
  EXPECT_EQ(params.layout()[3].name, "attn.c_proj.bias");
}

TEST(CausalSelfAttention, LaterPositionsDoNotChangeEarlierOutputs) {
  const int64_t T = 37, D = 8;
  CausalSelfAttention layer(D, 2);
  ParamSet params;
  layer.declare(params, "");
  params.allocate();
  Rng rng(6);
  layer.init(rng);
  Tensor x = random_input({1, T, D}, 1);
  auto c1 = layer.make_cache();
  const Tensor& y1 = layer.forward(x, *c1, kCtx);
  const int64_t cut = 20;
  Tensor x2 = random_input({1, T, D}, 1);
  for (int64_t i = (cut + 1) * D; i < T * D; ++i) x2.f32()[i] += 3.0f;
  auto c2 = layer.make_cache();
  const Tensor& y2 = layer.forward(x2, *c2, kCtx);
  for (int64_t i = 0; i < (cut + 1) * D; ++i) EXPECT_EQ(y1.f32()[i], y2.f32()[i]) << i;
  double diff = 0;
  for (int64_t i = (cut + 1) * D; i < T * D; ++i) diff += std::fabs(y1.f32()[i] - y2.f32()[i]);
  EXPECT_GT(diff, 1e-3);
}

TEST(CausalSelfAttention, EveryInstructionSetBuildIsCorrect) {
  using fast_math::Isa;
  for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (fast_math::detected_isa() < isa) continue;  // this CPU cannot run that build
    SCOPED_TRACE("isa " + std::to_string(static_cast<int>(isa)));
    fast_math::isa_limit = isa;
    CausalSelfAttention layer(64, 2);
    ParamSet params;
    layer.declare(params, "");
    params.allocate();
    Rng rng(4);
    layer.init(rng);
    Tensor x = random_input({2, 23, 64}, 9);
    auto cache = layer.make_cache();
    const Tensor& y = layer.forward(x, *cache, kCtx);
    const std::vector<double> ref = naive_attention(params, x, 2);
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.f32()[i], ref[i], 2e-5) << i;
    CausalSelfAttention fresh(32, 2);
    testing::GradCheckOptions opt;
    opt.max_checks = 16;
    expect_gradients_match(fresh, random_input({1, 19, 32}, 5), opt);
  }
  fast_math::isa_limit = Isa::avx512;
}

TEST(CausalSelfAttention, BadShapesAreErrors) {
  EXPECT_THROW(CausalSelfAttention(10, 3), Error);
  CausalSelfAttention layer(8, 2);
  EXPECT_THROW(layer.output_shape({2, 5, 6}), Error);
  EXPECT_THROW(layer.output_shape({10, 8}), Error);
}

}  // namespace
}  // namespace braid::nn
