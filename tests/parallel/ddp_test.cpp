// DDP against its references, with ranks as threads over the in-process transport: one
// process on the global batch (within a tolerance), one process accumulating N
// micro-batches (bitwise, deterministic mode), itself at one rank (bitwise the
// one-process strategy); parameters identical on every rank after every step; a rank
// with another model fails every rank at once, naming both.
#include "parallel/ddp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "comm/collectives.h"
#include "comm/inproc_ranks.h"
#include "core/rng.h"
#include "data/loader.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::message;
using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

std::vector<float> single_process(const json& model, StepOptions o, int64_t B, int steps) {
  SingleProcess s(train::build_model(model).module, o);
  for (int t = 0; t < steps; ++t) s.step(global_batch(B, t), 0.05f, t);
  return params_of(s);
}

// Runs DDP on n thread-ranks; returns rank 0's parameters and checks after every step
// that all ranks hold the same bits.
std::vector<float> ddp(const json& model, StepOptions o, int n, int64_t B, int steps,
                       DdpOptions d = {}) {
  std::vector<float> out;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Ddp s(train::build_model(model).module, o, group, d);
    for (int t = 0; t < steps; ++t) {
      s.step(shard(global_batch(B, t), group->rank(), n), 0.05f, t);
      EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()))
          << "rank " << group->rank() << " step " << t;
    }
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out = params_of(s);
    }
  }));
  return out;
}

// A regression batch: the global batch's images with 10 f32 targets a row.
data::Batch regression_batch(int64_t B, int64_t step) {
  data::Batch b = global_batch(B, step);
  b.targets = Tensor::empty(Shape{B, 10});
  Rng rng(2000 + static_cast<uint64_t>(step));
  for (int64_t i = 0; i < b.targets.numel(); ++i) b.targets.f32()[i] = rng.normal();
  return b;
}

data::Batch regression_shard(const data::Batch& g, int r, int n) {
  data::Batch labelled = g;  // shard() deals images and class labels: give it labels
  labelled.targets = Tensor::empty(Shape{g.size}, DType::i32);
  std::fill_n(labelled.targets.data<int32_t>(), g.size, 0);
  data::Batch b = shard(labelled, r, n);
  b.targets = Tensor::empty(Shape{b.size, 10});
  for (int64_t i = 0; i < b.size; ++i)
    std::memcpy(b.targets.f32() + i * 10, g.targets.f32() + (r + i * n) * 10, 10 * sizeof(float));
  return b;
}

// A loss given through StepOptions (here MSE on f32 targets, which cross-entropy would
// refuse) is the one DDP trains with: two ranks equal one process on the global batch, as
// with the default loss, within rounding.
TEST(Ddp, AGivenLossIsTheOneEveryRankTrainsWith) {
  StepOptions o = options("sgd");
  o.loss = std::make_shared<nn::MseLoss>();
  SingleProcess one(train::build_model(small_mlp()).module, o);
  for (int t = 0; t < 3; ++t) one.step(regression_batch(16, t), 0.05f, t);
  const std::vector<float> want = params_of(one);
  std::vector<float> got;
  std::mutex mu;
  rethrow_first(run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Ddp s(train::build_model(small_mlp()).module, o, group, {});
    for (int t = 0; t < 3; ++t)
      s.step(regression_shard(regression_batch(16, t), group->rank(), 2), 0.05f, t);
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      got = params_of(s);
    }
  }));
  ASSERT_EQ(got.size(), want.size());
  const float scale = largest(want);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << "parameter float " << i;
}

TEST(Ddp, OneRankIsBitwiseTheOneProcessStrategy) {
  for (const char* opt : {"sgd", "adamw"}) {
    const auto want = single_process(small_cnn(), options(opt), 16, 3);
    expect_bitwise(ddp(small_cnn(), options(opt), 1, 16, 3), want, opt);
  }
}

// Data parallelism computes the global batch's mean gradient as the mean of N shards'
// means: the same quantity summed in another order. Each step's update therefore differs
// from one process's by rounding only (relative ~1e-7 per sum); over three steps of SGD
// with momentum the parameters stay within 1e-5 of the largest one. A wrong average (a
// sum, a missing bucket, a shard seen twice) moves them by 1e-3 or more.
TEST(Ddp, TwoAndFourRanksEqualOneProcessOnTheGlobalBatch) {
  const auto want = single_process(small_mlp(), options("sgd"), 16, 3);
  for (int n : {2, 4}) {
    DdpOptions d;
    d.bucket_bytes = 2048;  // several buckets
    d.first_bucket_bytes = 1024;
    const auto got = ddp(small_mlp(), options("sgd"), n, 16, 3, d);
    ASSERT_EQ(got.size(), want.size());
    const float scale = largest(want);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << n << " ranks, parameter float " << i;
  }
}

TEST(Ddp, DeterministicRanksEqualOneProcessAccumulatingBitwise) {
  for (int n : {2, 4}) {
    for (const char* opt : {"sgd", "lamb"}) {
      StepOptions o = options(opt);
      o.deterministic = true;
      StepOptions single = o;
      single.accumulate_steps = n;
      const auto want = single_process(small_cnn(), single, 16, 3);
      DdpOptions d;
      d.bucket_bytes = 1024;
      d.first_bucket_bytes = 512;
      expect_bitwise(ddp(small_cnn(), o, n, 16, 3, d), want,
                     (std::to_string(n) + " ranks " + opt).c_str());
    }
  }
}

// One global batch of 16 in 4 micro-batches of 4, however it is spread: 4 ranks x 1,
// 2 ranks x 2 micro-batches, 1 rank x 4 (DDP at one rank, and the one-process strategy).
// tree_sum.h sums the 4 micro-batch gradients in one grouping for all of them, so the
// parameters agree to the bit; with SGD and LAMB, dropout and batch norm.
TEST(Ddp, DeterministicIsBitwiseAcrossWorldSizesAtOneGlobalBatch) {
  for (const char* opt : {"sgd", "lamb"}) {
    StepOptions single = options(opt);
    single.deterministic = true;
    single.accumulate_steps = 4;
    const auto want = single_process(small_cnn(), single, 16, 3);
    for (const auto& [n, m] : {std::pair{4, 1}, {2, 2}, {1, 4}}) {
      StepOptions o = single;
      o.accumulate_steps = m;
      DdpOptions d;
      d.bucket_bytes = 1024;
      d.first_bucket_bytes = 512;
      expect_bitwise(ddp(small_cnn(), o, n, 16, 3, d), want,
                     (std::to_string(n) + " ranks x " + std::to_string(m) + " " + opt).c_str());
    }
  }
}

// m micro-batches of B/m make the step of one batch of B (up to rounding: the micro
// means are scaled by 1/m before they add up).
TEST(Accumulation, MicroBatchesEqualOneLargeBatch) {
  const auto want = single_process(small_mlp(), options("sgd"), 16, 3);
  StepOptions o = options("sgd");
  o.accumulate_steps = 4;
  const auto got = single_process(small_mlp(), o, 16, 3);
  const float scale = largest(want);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << i;
  EXPECT_NE(got, single_process(small_mlp(), options("sgd"), 4, 3)) << "accumulation did nothing";
}

// Accumulation outside deterministic mode: each rank scales its m micro-batch means by 1/m
// as backward adds them up, then the ranks' sums are averaged. With plain SGD (no
// momentum, no weight decay, no clipping) and the small MLP (no batch norm, no dropout:
// a row's gradient is its own) that is one process's step on the global batch up to
// rounding, 1e-5 of the largest parameter after three steps as above. Nothing here
// normalises the step's size (Adam, clipping), so a sum of the micro-batch means instead
// of their mean (a step m times too long) moves the parameters by 1e-3 or more.
TEST(Ddp, AccumulatingRanksEqualOneProcessOnTheGlobalBatch) {
  StepOptions o = options("sgd");
  o.optimizer.momentum = 0;
  o.optimizer.weight_decay = 0;
  const auto start = single_process(small_mlp(), o, 16, 0);
  const auto want = single_process(small_mlp(), o, 16, 3);
  for (const auto& [n, m] : {std::pair{2, 2}, {2, 4}, {4, 2}}) {
    StepOptions accumulating = o;
    accumulating.accumulate_steps = m;
    DdpOptions d;
    d.bucket_bytes = 2048;
    d.first_bucket_bytes = 1024;
    const auto got = ddp(small_mlp(), accumulating, n, 16, 3, d);
    ASSERT_EQ(got.size(), want.size());
    const float scale = largest(want);
    float moved = 0;
    for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, std::fabs(want[i] - start[i]));
    ASSERT_GT(moved, 100 * 1e-5f * scale) << "three steps hardly moved the model";
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5f * scale)
          << n << " ranks x " << m << " micro-batches, parameter float " << i;
  }
}

TEST(Ddp, DifferentModelsFailAtOnceNamingBothRanks) {
  std::vector<std::string> errors(2);
  const auto results = run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    const json model = group->rank() == 0 ? small_mlp() : small_cnn();
    Ddp s(train::build_model(model).module, options("sgd"), group);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string e = message(results[static_cast<size_t>(r)]);
    EXPECT_NE(e.find("rank 0 and rank 1 hold different models"), std::string::npos) << e;
  }
}

TEST(Ddp, BucketsTileTheBufferInReverseLayerOrder) {
  rethrow_first(run_group(1, [&](comm::Group& world) {
    auto group = world.split(0, 0);
    DdpOptions d;
    d.bucket_bytes = 4096;
    d.first_bucket_bytes = 1024;
    Ddp s(train::build_model(small_mlp()).module, options("sgd"), group, d);
    const auto& b = s.buckets();
    ASSERT_GE(b.size(), 2u);  // [last bias, last weight] then the rest
    EXPECT_EQ(b.front().end, s.params().size());
    EXPECT_EQ(b.back().begin, 0);
    for (size_t i = 1; i < b.size(); ++i) EXPECT_EQ(b[i].end, b[i - 1].begin) << i;
  }));
}

}  // namespace
}  // namespace braid::parallel
