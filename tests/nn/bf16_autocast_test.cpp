// Precision::bf16 in Linear and the GPT's tied head (nn/xwt_product.h) against fp32, with
// a bound derived from the format: bf16 keeps 8 significant bits, so rounding to it moves a
// value by at most 2^-8 of itself (round to nearest); a product of two rounded operands by
// at most 2^-7 (plus 2^-16), so every output is within 2^-7 x sum|terms| of fp32's, plus
// fp32's own accumulation.
// The widened fallback (a CPU without oneDNN's bf16) gives the same within fp32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "core/convert.h"
#include "core/gemm_bf16.h"
#include "gradcheck.h"
#include "nn/conv2d.h"
#include "nn/gpt.h"
#include "nn/linear.h"
#include "nn/params.h"

namespace braid::nn {
namespace {

using testing::random_input;

constexpr double kBf16Terms = 1.0 / 128 + 1.0 / 65536;  // two roundings of 2^-8

struct Outputs {
  std::vector<float> y, dx, dw;
};

// y = x W^T + b, then backward of dy, at `precision`.
Outputs linear_run(Linear& layer, ParamSet& params, const Tensor& x, const Tensor& dy,
                   Precision precision) {
  auto cache = layer.make_cache();
  ForwardContext ctx;
  ctx.precision = precision;
  const Tensor& y = layer.forward(x, *cache, ctx);
  Outputs r;
  r.y.assign(y.f32(), y.f32() + y.numel());
  params.zero_grads();
  const Tensor& dx = layer.backward(dy, *cache, true);
  r.dx.assign(dx.f32(), dx.f32() + dx.numel());
  const float* g = params.grads();
  r.dw.assign(g, g + params.size());
  return r;
}

// Each output within 2^-7 of its terms' magnitude (plus fp32 accumulation, K x 2^-23).
void expect_within_format(const std::vector<float>& got, const std::vector<float>& want,
                          const std::vector<double>& magnitude, int64_t K, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = magnitude[i] * (kBf16Terms + static_cast<double>(K) * 1.2e-7) + 1e-30;
    ASSERT_NEAR(got[i], want[i], tol) << what << "[" << i << "]";
  }
}

TEST(Bf16Autocast, LinearStaysWithinTheFormatsBoundOfFp32) {
  const int64_t rows = 24, in = 40, out = 18;
  Linear layer(in, out);
  ParamSet params;
  layer.declare(params, "");
  params.allocate();
  Rng rng(5);
  layer.init(rng);
  // Inputs of mixed scale, so some rounding is relative to large terms and some to small.
  Tensor x = random_input({rows, in}, 1);
  for (int64_t i = 0; i < x.numel(); i += 7) x.f32()[i] *= 1000.0f;
  const Tensor dy = random_input({rows, out}, 2);
  const Outputs fp32 = linear_run(layer, params, x, dy, Precision::fp32);
  const Outputs bf16 = linear_run(layer, params, x, dy, Precision::bf16);

  const float* w = params.param(0).f32();
  std::vector<double> my(static_cast<size_t>(rows * out)), mdx(static_cast<size_t>(rows * in)),
      mdw(static_cast<size_t>(params.size()), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) {
        my[r * out + o] += std::fabs(x.f32()[r * in + k] * w[o * in + k]);
        mdx[r * in + k] += std::fabs(dy.f32()[r * out + o] * w[o * in + k]);
        mdw[o * in + k] += std::fabs(dy.f32()[r * out + o] * x.f32()[r * in + k]);
      }
  expect_within_format(bf16.y, fp32.y, my, in, "y");
  expect_within_format(bf16.dx, fp32.dx, mdx, out, "dx");
  mdw.resize(static_cast<size_t>(out * in));  // the bias gradient is a plain fp32 sum
  expect_within_format(std::vector<float>(bf16.dw.begin(), bf16.dw.begin() + out * in),
                       std::vector<float>(fp32.dw.begin(), fp32.dw.begin() + out * in), mdw, rows,
                       "dW");
  // It is not fp32 in disguise: bf16 rounding moved some outputs.
  EXPECT_NE(bf16.y, fp32.y);
}

TEST(Bf16Autocast, TheWidenedFallbackGivesTheFastPathsResults) {
  if (bf16_gemm_path() != Bf16GemmPath::onednn) GTEST_SKIP() << "no oneDNN bf16 on this CPU";
  Linear layer(96, 64);
  ParamSet params;
  layer.declare(params, "");
  params.allocate();
  Rng rng(9);
  layer.init(rng);
  const Tensor x = random_input({32, 96}, 3), dy = random_input({32, 64}, 4);
  const Outputs fast = linear_run(layer, params, x, dy, Precision::bf16);
  set_bf16_gemm_path(Bf16GemmPath::widen);
  const Outputs widened = linear_run(layer, params, x, dy, Precision::bf16);
  set_bf16_gemm_path(Bf16GemmPath::onednn);
  for (const auto& [a, b] : {std::pair{&fast.y, &widened.y}, std::pair{&fast.dx, &widened.dx},
                             std::pair{&fast.dw, &widened.dw}})
    for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], 1e-4) << i;
}

// Convolutions' gemm path: a bf16 step equals an fp32 step on the operands rounded to bf16
// (x, W and dy), since products of bf16 values are exact in fp32; only the order of the
// fp32 sums differs (1e-5 of the largest output bounds it here).
TEST(Bf16Autocast, ConvolutionEqualsFp32OnTheRoundedOperands) {
  struct Case {
    int64_t B, H, W, C, O, k, stride, pad;
  };
  for (const Case& f : {Case{2, 9, 11, 8, 16, 3, 1, 1}, Case{2, 10, 10, 5, 12, 3, 2, 0}}) {
    SCOPED_TRACE(::testing::Message() << "C=" << f.C << " stride " << f.stride << " pad " << f.pad);
    auto round = [](Tensor& t) {
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16_to_float(float_to_bf16(t.f32()[i]));
    };
    auto run = [&](bool rounded, Precision p, std::vector<float>& y, std::vector<float>& dx,
                   std::vector<float>& dw) {
      Conv2d conv(f.C, f.O, f.k, f.stride, f.pad);
      conv.set_algorithm(Conv2d::Algorithm::gemm);
      ParamSet params;
      conv.declare(params, "");
      params.allocate();
      Rng rng(4);
      conv.init(rng);
      Tensor x = random_input({f.B, f.H, f.W, f.C}, 1);
      Tensor dy = random_input(conv.output_shape(x.shape()), 2);
      if (rounded) {
        round(x);
        round(dy);
        Tensor w = params.param(0);
        round(w);
      }
      auto cache = conv.make_cache();
      ForwardContext ctx;
      ctx.precision = p;
      const Tensor& out = conv.forward(x, *cache, ctx);
      y.assign(out.f32(), out.f32() + out.numel());
      params.zero_grads();
      const Tensor& g = conv.backward(dy, *cache, true);
      dx.assign(g.f32(), g.f32() + g.numel());
      dw.assign(params.grads(), params.grads() + params.info(0).numel());
    };
    std::vector<float> y16, dx16, dw16, y32, dx32, dw32;
    run(false, Precision::bf16, y16, dx16, dw16);
    run(true, Precision::fp32, y32, dx32, dw32);
    for (const auto& [got, want, what] :
         {std::tuple{&y16, &y32, "y"}, std::tuple{&dx16, &dx32, "dx"},
          std::tuple{&dw16, &dw32, "dW"}}) {
      double largest = 0;
      for (const float v : *want) largest = std::max(largest, std::fabs(static_cast<double>(v)));
      for (size_t i = 0; i < got->size(); ++i)
        ASSERT_NEAR((*got)[i], (*want)[i], 1e-5 * largest) << what << "[" << i << "]";
    }
  }
}

TEST(Bf16Autocast, GptLogitsAndGradientsTrackFp32) {
  GptConfig c;
  c.vocab = 50;
  c.context = 8;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 2;
  auto model = make_gpt(c);
  ParamSet params;
  model->declare(params, "");
  params.allocate();
  Rng rng(2);
  model->init(rng);
  Tensor tokens = Tensor::empty({3, 8}, DType::i32);
  for (int64_t i = 0; i < tokens.numel(); ++i)
    tokens.data<int32_t>()[i] = static_cast<int32_t>(i * 7 % 50);
  const Tensor dlogits = random_input({3, 8, 50}, 6);
  auto run = [&](Precision p, std::vector<float>& logits, std::vector<float>& grads) {
    auto cache = model->make_cache();
    ForwardContext ctx;
    ctx.precision = p;
    const Tensor& y = model->forward(tokens, *cache, ctx);
    logits.assign(y.f32(), y.f32() + y.numel());
    params.zero_grads();
    model->backward(dlogits, *cache, false);
    grads.assign(params.grads(), params.grads() + params.size());
  };
  std::vector<float> l32, g32, l16, g16;
  run(Precision::fp32, l32, g32);
  run(Precision::bf16, l16, g16);
  // Through two blocks the bound compounds; logits of magnitude ~0.1-1 stay within 2 %
  // of the largest, gradients within 5 % of the largest (relative to fp32's norm).
  double lmax = 0, gmax = 0, ldiff = 0, gdiff = 0;
  for (size_t i = 0; i < l32.size(); ++i) {
    lmax = std::max(lmax, std::fabs(static_cast<double>(l32[i])));
    ldiff = std::max(ldiff, std::fabs(static_cast<double>(l32[i] - l16[i])));
  }
  for (size_t i = 0; i < g32.size(); ++i) {
    gmax = std::max(gmax, std::fabs(static_cast<double>(g32[i])));
    gdiff = std::max(gdiff, std::fabs(static_cast<double>(g32[i] - g16[i])));
  }
  EXPECT_LT(ldiff, 0.02 * lmax);
  EXPECT_LT(gdiff, 0.05 * gmax);
  EXPECT_GT(ldiff, 0) << "bf16 computed exactly fp32's logits: was it used?";
}

}  // namespace
}  // namespace braid::nn
