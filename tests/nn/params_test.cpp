// The flat buffers' lazy gradient zeroing: zero_grads() only marks gradients stale; the
// first write overwrites, later ones accumulate, and the flat buffer read after backward
// is exact (untouched gradients read as zero) whatever the buffer held before.
#include "nn/params.h"

#include <vector>

#include "gradcheck.h"
#include "nn/linear.h"

namespace braid::nn {
namespace {

using testing::random_input;

TEST(ParamSet, ZeroGradsIsLazyButExact) {
  ParamSet params;
  const ParamSet::Id a = params.declare("a", {5}, true);
  const ParamSet::Id b = params.declare("b", {3}, false);
  params.allocate();
  params.grad(a).f32()[0] = 7.0f;  // an older step's values
  params.grad(b).f32()[2] = 9.0f;
  params.zero_grads();
  bool overwrite = false;
  params.grad_for_write(a, overwrite);
  EXPECT_TRUE(overwrite);
  params.grad_for_write(a, overwrite);
  EXPECT_FALSE(overwrite);                   // written once since zero_grads: accumulate now
  EXPECT_EQ(params.grad(a).f32()[0], 7.0f);  // memory untouched: the caller overwrites it
  // b was never written: the flat buffer reads it as zero.
  const float* g = params.grads();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g[params.info(b).offset + i], 0.0f) << i;
  // grad() on a stale gradient zeroes it before the caller accumulates.
  params.grad(b).f32()[1] = 4.0f;
  params.zero_grads();
  EXPECT_EQ(params.grad(b).f32()[1], 0.0f);
  params.grad_for_write(b, overwrite);
  EXPECT_FALSE(overwrite);
}

// Two backward passes without zero_grads accumulate: exactly twice one pass, whatever the
// buffer held before (gradient accumulation over micro-batches relies on this).
TEST(ParamSet, LinearGradientsAccumulateAfterTheFirstWrite) {
  Linear layer(6, 4);
  ParamSet params;
  layer.declare(params, "");
  params.allocate();
  Rng rng(3);
  layer.init(rng);
  const Tensor x = random_input({5, 6}, 1), dy = random_input({5, 4}, 2);
  auto cache = layer.make_cache();
  auto grads_after = [&](int passes) {
    std::fill(params.grads(), params.grads() + params.size(), 123.0f);  // an older step's
    params.zero_grads();
    for (int p = 0; p < passes; ++p) {
      layer.forward(x, *cache, ForwardContext());
      layer.backward(dy, *cache, false);
    }
    std::vector<float> g;
    for (const ParamInfo& p : params.layout())
      g.insert(g.end(), params.grads() + p.offset, params.grads() + p.offset + p.numel());
    return g;
  };
  const std::vector<float> once = grads_after(1), twice = grads_after(2);
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_NE(once[i], 123.0f) << i;
    EXPECT_FLOAT_EQ(twice[i], 2.0f * once[i]) << i;
  }
}

}  // namespace
}  // namespace braid::nn
