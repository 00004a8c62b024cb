// Outputs written in bf16 for the Linear that reads them (nn/rounded_output.h): LayerNorm
// and GELU with set_output_feeds_product, followed by a Linear, give bit for bit the
// outputs and gradients of the same pair without it (where the Linear rounds an fp32
// output itself), while keeping only the bf16 copy. And the bias gradient summed in the
// pass that rounds dy equals fp32's sum exactly.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "gradcheck.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/params.h"

namespace braid::nn {
namespace {

using testing::random_input;

struct Run {
  std::vector<float> y, dx, grads;
  DType handed_over = DType::f32;  // the dtype the Linear received
};

// first -> Linear(dim -> out), forward and backward at `precision`.
Run run_pair(Module& first, ParamSet& params, Linear& linear, const Tensor& x, const Tensor& dy,
             Precision precision) {
  auto c1 = first.make_cache();
  auto c2 = linear.make_cache();
  ForwardContext ctx;
  ctx.precision = precision;
  Run r;
  const Tensor& h = first.forward(x, *c1, ctx);
  r.handed_over = h.dtype();
  const Tensor& y = linear.forward(h, *c2, ctx);
  r.y.assign(y.f32(), y.f32() + y.numel());
  params.zero_grads();
  const Tensor& dh = linear.backward(dy, *c2, true);
  const Tensor& dx = first.backward(dh, *c1, true);
  r.dx.assign(dx.f32(), dx.f32() + dx.numel());
  r.grads.assign(params.grads(), params.grads() + params.size());
  return r;
}

// Two identical pairs (same initial values), one handing over bf16.
void expect_same_bits(const std::function<std::unique_ptr<Module>(bool)>& make_first, int64_t dim) {
  const int64_t rows = 37, out = 24;  // rows not a multiple of the rounding's block
  const Tensor x = random_input({rows, dim}, 1);
  const Tensor dy = random_input({rows, out}, 2);
  std::vector<Run> runs;
  for (const bool feeds : {false, true})
    for (const Precision precision : {Precision::bf16, Precision::fp32}) {
      auto first = make_first(feeds);
      Linear linear(dim, out);
      ParamSet params;
      first->declare(params, "first.");
      linear.declare(params, "linear.");
      params.allocate();
      Rng rng(7);
      first->init(rng);
      linear.init(rng);
      runs.push_back(run_pair(*first, params, linear, x, dy, precision));
    }
  const Run &bf16 = runs[0], &fp32 = runs[1], &bf16_handed = runs[2], &fp32_flagged = runs[3];
  EXPECT_EQ(bf16.handed_over, DType::f32);
  EXPECT_EQ(bf16_handed.handed_over, DType::bf16);
  EXPECT_EQ(fp32_flagged.handed_over, DType::f32) << "the flag acts under bf16 only";
  EXPECT_EQ(bf16_handed.y, bf16.y);
  EXPECT_EQ(bf16_handed.dx, bf16.dx);
  EXPECT_EQ(bf16_handed.grads, bf16.grads);
  EXPECT_EQ(fp32_flagged.y, fp32.y);
  EXPECT_EQ(fp32_flagged.grads, fp32.grads);
  EXPECT_NE(bf16.y, fp32.y) << "bf16 is not fp32 in disguise";
  // The Linear's bias gradient (its last `out` floats) is dy's column sums under every
  // precision: summed while rounding dy under bf16, to the same bits.
  const std::vector<float> bias_bf16(bf16.grads.end() - out, bf16.grads.end());
  const std::vector<float> bias_fp32(fp32.grads.end() - out, fp32.grads.end());
  EXPECT_EQ(bias_bf16, bias_fp32);
}

TEST(RoundedOutput, LayerNormHandsLinearItsBf16OperandWithTheSameBits) {
  const int64_t dim = 200;  // more than one row per block, and a partial last block
  expect_same_bits(
      [&](bool feeds) {
        auto ln = std::make_unique<LayerNorm>(dim);
        ln->set_output_feeds_product(feeds);
        return std::unique_ptr<Module>(std::move(ln));
      },
      dim);
}

TEST(RoundedOutput, GeluHandsLinearItsBf16OperandWithTheSameBits) {
  const int64_t dim = 64;
  for (const GeluApprox approx : {GeluApprox::tanh, GeluApprox::none})
    expect_same_bits(
        [&](bool feeds) {
          auto gelu = std::make_unique<Gelu>(approx);
          gelu->set_output_feeds_product(feeds);
          return std::unique_ptr<Module>(std::move(gelu));
        },
        dim);
}

TEST(RoundedOutput, ALinearRefusesABf16InputOutsideBf16Precision) {
  Linear linear(8, 4);
  ParamSet params;
  linear.declare(params, "");
  params.allocate();
  const Tensor x = Tensor::empty({3, 8}, DType::bf16);
  auto cache = linear.make_cache();
  ForwardContext ctx;  // fp32
  try {
    linear.forward(x, *cache, ctx);
    FAIL() << "a bf16 input under fp32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::nn
