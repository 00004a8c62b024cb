// fp16 training's loss scaling inside the strategies: an injected overflow (an input past
// fp16's 65504, which becomes inf when the first layer rounds it) skips the step, leaves
// every weight bit as it was, spends the hysteresis and then halves the scale; clean steps
// train and keep every weight finite. Under DDP the ranks decide on the same reduced
// gradient: one rank's overflow skips the step on both.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "comm/inproc_ranks.h"
#include "parallel/ddp.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"
#include "parallel/zero.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

StepOptions fp16_options() {
  StepOptions o = options("sgd");
  o.precision = nn::Precision::fp16;
  o.loss_scaling =
      optim::LossScalerConfig{.initial_scale = 256, .factor = 2, .window = 100, .hysteresis = 2};
  return o;
}

data::Batch overflowing(data::Batch b) {
  data::Batch copy = b;
  copy.inputs = Tensor::empty(b.inputs.shape());
  copy.inputs.copy_from(b.inputs);
  copy.inputs.f32()[5] = 1e6f;  // past fp16's largest finite value
  return copy;
}

bool all_finite(const std::vector<float>& v) {
  for (const float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

TEST(LossScaling, AnOverflowSkipsTheStepAndTheScaleHalvesAfterTheHysteresis) {
  SingleProcess s(train::build_model(small_mlp()).module, fp16_options());
  const optim::LossScaler& scaler = *s.loss_scaler();
  s.step(global_batch(16, 0), 0.05f, 0);
  const std::vector<float> trained = params_of(s);
  ASSERT_TRUE(all_finite(trained));
  EXPECT_EQ(scaler.skipped(), 0);

  s.step(overflowing(global_batch(16, 1)), 0.05f, 1);
  expect_bitwise(params_of(s), trained, "after the first overflow");
  EXPECT_EQ(scaler.skipped(), 1);
  EXPECT_EQ(scaler.scale(), 256) << "the first overflow only spends the hysteresis";

  s.step(overflowing(global_batch(16, 2)), 0.05f, 2);
  expect_bitwise(params_of(s), trained, "after the second overflow");
  EXPECT_EQ(scaler.skipped(), 2);
  EXPECT_EQ(scaler.scale(), 128);

  s.step(global_batch(16, 3), 0.05f, 3);
  const std::vector<float> after = params_of(s);
  EXPECT_TRUE(all_finite(after));
  EXPECT_NE(after, trained) << "a clean step after the overflows did not train";
  EXPECT_EQ(scaler.skipped(), 2);
}

// The loss is scaled and the gradients unscaled: a clean fp16 step moves the weights as an
// fp32 step does, up to fp16's rounding of the operands (2^-10 of the terms, bounded here
// by 1 % of the largest move).
TEST(LossScaling, ACleanStepMatchesFp32WithinFp16sRounding) {
  SingleProcess half(train::build_model(small_mlp()).module, fp16_options());
  SingleProcess full(train::build_model(small_mlp()).module, options("sgd"));
  const std::vector<float> before = params_of(full);
  half.step(global_batch(16, 0), 0.05f, 0);
  full.step(global_batch(16, 0), 0.05f, 0);
  const std::vector<float> a = params_of(half), b = params_of(full);
  double largest_move = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest_move = std::max(largest_move, std::fabs(static_cast<double>(b[i] - before[i])));
    diff = std::max(diff, std::fabs(static_cast<double>(a[i] - b[i])));
  }
  EXPECT_GT(largest_move, 0);
  EXPECT_LT(diff, 0.01 * largest_move);
}

// Both data-parallel strategies agree on the overflow: DDP's ranks see the same reduced
// gradient; ZeRO's each see their chunk, and vote.
template <typename S, typename Options>
void ranks_skip_together_when_one_overflows(const Options& extra) {
  std::vector<std::vector<float>> before(2), after(2);
  std::vector<int64_t> skipped(2);
  std::mutex mu;
  rethrow_first(run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    const int r = group->rank();
    S s(train::build_model(small_mlp()).module, fp16_options(), group, extra);
    s.step(shard(global_batch(16, 0), r, 2), 0.05f, 0);
    s.synchronize();  // ZeRO stage 3: the whole parameters
    const std::vector<float> mine_before = params_of(s);
    const data::Batch b = shard(global_batch(16, 1), r, 2);
    s.step(r == 1 ? overflowing(b) : b, 0.05f, 1);
    s.synchronize();
    const std::lock_guard lock(mu);
    before[static_cast<size_t>(r)] = mine_before;
    after[static_cast<size_t>(r)] = params_of(s);
    skipped[static_cast<size_t>(r)] = s.loss_scaler()->skipped();
  }));
  for (int r = 0; r < 2; ++r) {
    expect_bitwise(after[static_cast<size_t>(r)], before[static_cast<size_t>(r)], "skipped step");
    EXPECT_EQ(skipped[static_cast<size_t>(r)], 1) << "rank " << r;
  }
  expect_bitwise(after[0], after[1], "ranks agree");
}

TEST(LossScaling, DdpRanksSkipTogetherWhenOneOverflows) {
  ranks_skip_together_when_one_overflows<Ddp>(DdpOptions{});
}

TEST(LossScaling, ZeroRanksSkipTogetherWhenOneOverflows) {
  for (int stage : {1, 2, 3}) {
    ZeroOptions z;
    z.stage = stage;
    ranks_skip_together_when_one_overflows<Zero>(z);
  }
}

}  // namespace
}  // namespace braid::parallel
