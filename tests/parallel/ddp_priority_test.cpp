// Priority scheduling (gradient_reducer.h, DDP's deferred updates), with ranks as threads
// over the in-process transport: the pieces go out bucket 0's first, then the input side's
// first among the buckets every rank has ready, the same order on every rank; a run with
// it equals the first-in-first-out run bit for bit in deterministic mode (3 ranks) and at
// 2 ranks, though each bucket is updated in the next forward; and what a step leaves
// pending is applied before anything reads the parameters (settle, synchronize).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "comm/inproc_ranks.h"
#include "comm/progress_engine.h"
#include "parallel/ddp.h"
#include "parallel/gradient_reducer.h"
#include "parallel/strategy_test_data.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int64_t kBatch = 24;

// Six linear layers: several buckets of a few pieces each.
json deep_mlp() {
  json layers = json::array({{{"type", "flatten"}}});
  for (int i = 0; i < 5; ++i) {
    layers.push_back({{"type", "linear"}, {"out_features", 24}});
    layers.push_back({{"type", "relu"}});
  }
  layers.push_back({{"type", "linear"}, {"out_features", 10}});
  return {{"input", {12, 12, 1}}, {"layers", layers}};
}

std::vector<float> train(int n, bool deterministic, bool priority, int steps) {
  std::vector<float> out;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    StepOptions o = options("adamw");
    o.deterministic = deterministic;
    DdpOptions d;
    d.bucket_bytes = 4000;
    d.first_bucket_bytes = 2000;
    d.priority = priority;
    d.partition_bytes = 256;  // 64 floats: buckets of several pieces
    Ddp s(train::build_model(deep_mlp()).module, o, group, d);
    for (int t = 0; t < steps; ++t)
      s.step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
    s.synchronize();  // applies the last step's pending updates
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()));
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out = params_of(s);
    }
  }));
  return out;
}

// Partition 0: the tuner tries each candidate on the first steps and keeps one; the pieces
// change size between steps, and every rank keeps the same partition.
std::vector<float> train_tuned(int steps, bool priority, std::vector<size_t>* chosen) {
  std::vector<float> out;
  std::mutex mu;
  rethrow_first(run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    DdpOptions d;
    d.bucket_bytes = 24000;  // a largest bucket of ~24 KB: candidates of 24, 6 and 4 KiB
    d.first_bucket_bytes = 2000;
    d.priority = priority;
    d.partition_bytes = 0;
    Ddp s(train::build_model(deep_mlp()).module, options("adamw"), group, d);
    for (int t = 0; t < steps; ++t)
      s.step(shard(global_batch(kBatch, t), group->rank(), 2), kLr, t);
    s.synchronize();
    const std::lock_guard lock(mu);
    if (const PartitionTuner* tuner = s.partition_tuner()) {
      EXPECT_EQ(tuner->candidates().size(), 3u);
      EXPECT_TRUE(tuner->done());
      if (tuner->done()) chosen->push_back(tuner->chosen());
    }
    if (group->rank() == 0) out = params_of(s);
  }));
  return out;
}

TEST(DdpPriority, ATunedPartitionEqualsFifoBitwiseAndIsTheSameOnEveryRank) {
  std::vector<size_t> chosen, none;
  const std::vector<float> tuned = train_tuned(14, true, &chosen);
  expect_bitwise(tuned, train_tuned(14, false, &none), "2 ranks, partition tuned");
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0], chosen[1]);
  EXPECT_TRUE(none.empty()) << "no tuner without priority scheduling";
}

TEST(DdpPriority, EqualsFifoBitwiseInDeterministicModeAndAtTwoRanks) {
  expect_bitwise(train(3, true, true, 5), train(3, true, false, 5), "3 ranks, deterministic");
  expect_bitwise(train(2, false, true, 5), train(2, false, false, 5), "2 ranks");
}

// The updates of the last step wait in the next forward: until then the parameters are the
// step before's, and settle() applies them.
TEST(DdpPriority, AStepsUpdatesArePendingUntilTheNextForwardOrSettle) {
  rethrow_first(run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    DdpOptions d;
    d.priority = true;
    Ddp s(train::build_model(deep_mlp()).module, options("sgd"), group, d);
    const std::vector<float> before = params_of(s);
    s.step(shard(global_batch(kBatch, 0), group->rank(), 2), kLr, 0);
    EXPECT_EQ(params_of(s), before) << "updated before the next forward";
    s.settle();
    EXPECT_NE(params_of(s), before) << "settle() applied nothing";
  }));
}

// The order rule on its own: every bucket is ready before the step's task starts (the
// engine is held by a task in front of it), so the first piece is bucket 0's (no rank knows
// the others' readiness yet) and, once its sum says every bucket is ready everywhere, the
// rest go highest bucket first, each bucket's pieces in order.
TEST(DdpPriority, PiecesGoBucketZeroFirstThenTheInputSideFirst) {
  std::vector<std::vector<int>> orders(3);
  rethrow_first(run_group(3, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    std::unique_ptr<nn::Module> model = train::build_model(deep_mlp()).module;
    nn::ParamSet params;
    model->declare(params, "");
    params.allocate();
    ReducerOptions r;
    r.bucket_bytes = 4000;
    r.first_bucket_bytes = 2000;
    r.priority = true;
    r.partition_bytes = 2048;
    GradientReducer reducer(params, group, r);
    reducer.prepare([](size_t) -> void* { return nullptr; });
    comm::ProgressEngine engine(group);
    reducer.use_engine(&engine);
    std::atomic<bool> release{false};
    comm::Handle hold = engine.submit("hold", [&release](comm::Group&) {
      while (!release.load()) std::this_thread::yield();
    });
    reducer.arm(0);
    float* grads = params.grad_memory();
    for (size_t i = 0; i < reducer.buckets().size(); ++i)
      reducer.start(i, grads + reducer.buckets()[i].begin);
    release = true;
    for (size_t i = 0; i < reducer.buckets().size(); ++i) reducer.wait(i, nullptr);
    orders[static_cast<size_t>(group->rank())] = reducer.last_order();
  }));
  const size_t buckets = [] {
    std::unique_ptr<nn::Module> model = train::build_model(deep_mlp()).module;
    nn::ParamSet params;
    model->declare(params, "");
    return bucket_ranges(params, 2000, 4000).size();
  }();
  ASSERT_GE(buckets, 3u);
  const std::vector<int>& got = orders[0];
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front(), 0) << "the first piece is bucket 0's";
  // After it: non-increasing bucket numbers (the input side first).
  for (size_t k = 2; k < got.size(); ++k)
    EXPECT_LE(got[k], got[k - 1]) << "piece " << k << " went out of priority order";
  EXPECT_EQ(got[1], static_cast<int>(buckets) - 1) << "the input side's bucket came second";
  EXPECT_EQ(orders[1], got);
  EXPECT_EQ(orders[2], got);
}

}  // namespace
}  // namespace braid::parallel
