// Local SGD against references built from one-process strategies, with ranks as threads
// over the in-process transport: N one-process models, each trained on its rank's shard
// and averaged by hand every H steps (momentum kept per rank); DDP itself for the warm-up
// steps of post-local SGD (bitwise) and for H = 1 with plain SGD (the same update, summed
// in another order); synchronize() leaves every rank one model and one optimizer state.
#include "parallel/local_sgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "comm/inproc_ranks.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int64_t kBatch = 16;

// What `run` gives back from rank 0, after every step.
struct Trace {
  std::vector<std::vector<float>> params;  // after each step
};

Trace run_local_sgd(const json& model, StepOptions o, int n, int steps, LocalSgdOptions local,
                    DdpOptions d = {}) {
  Trace out;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    LocalSgd s(train::build_model(model).module, o, group, local, d);
    for (int t = 0; t < steps; ++t) {
      s.step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
      // Every rank holds the same bits exactly when the step ended in an average (or was a
      // synchronous warm-up step).
      const bool averaged = t < local.start_step || (t + 1 - local.start_step) % local.period == 0;
      EXPECT_EQ(same_bits_on_every_rank(s, s.params().params(), s.params().size()), averaged)
          << "rank " << group->rank() << " step " << t;
      if (group->rank() == 0) {
        const std::lock_guard lock(mu);
        out.params.push_back(params_of(s));
      }
    }
  }));
  return out;
}

// N one-process models, rank r's trained on shard r, their parameters replaced by the
// mean (summed in rank order) every H steps; each keeps its own momentum.
std::vector<std::vector<float>> by_hand(const json& model, StepOptions o, int n, int steps,
                                        int period) {
  std::vector<std::unique_ptr<SingleProcess>> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(std::make_unique<SingleProcess>(train::build_model(model).module, o));
  std::vector<std::vector<float>> out;
  const int64_t size = ranks[0]->params().size();
  for (int t = 0; t < steps; ++t) {
    for (int r = 0; r < n; ++r) ranks[r]->step(shard(global_batch(kBatch, t), r, n), kLr, t);
    if ((t + 1) % period == 0) {
      for (int64_t i = 0; i < size; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += ranks[r]->params().params()[i];
        for (int r = 0; r < n; ++r) ranks[r]->params().params()[i] = sum / static_cast<float>(n);
      }
    }
    out.push_back(params_of(*ranks[0]));
  }
  return out;
}

// Rank 0's parameters after every step, local steps and averages alike, against the
// hand-made reference. Only the averages' summation order differs (an allreduce against
// a rank-order loop): ~1e-7 relative per average, so 1e-5 of the largest parameter after
// six steps. Averaging momentum, skipping an average or averaging at the wrong step moves
// parameters by 1e-3 or more.
TEST(LocalSgd, EqualsRanksTrainedAloneAndAveragedEveryHSteps) {
  for (int n : {2, 3}) {
    const LocalSgdOptions local{.period = 3};
    const Trace got = run_local_sgd(small_mlp(), options("sgd"), n, 6, local);
    const auto want = by_hand(small_mlp(), options("sgd"), n, 6, 3);
    for (size_t t = 0; t < want.size(); ++t) {
      const float tol = 1e-5f * largest(want[t]);
      for (size_t i = 0; i < want[t].size(); ++i)
        ASSERT_NEAR(got.params[t][i], want[t][i], tol)
            << n << " ranks, step " << t << ", parameter float " << i;
    }
  }
}

TEST(LocalSgd, WarmupStepsAreDdpStepsBitwise) {
  const int n = 2, warmup = 3;
  const LocalSgdOptions local{.period = 4, .start_step = warmup};
  const Trace got = run_local_sgd(small_cnn(), options("adamw"), n, warmup + 2, local);
  // DDP's own trace over the warm-up.
  std::vector<std::vector<float>> want;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Ddp s(train::build_model(small_cnn()).module, options("adamw"), group);
    for (int t = 0; t < warmup; ++t) {
      s.step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
      const std::lock_guard lock(mu);
      if (group->rank() == 0) want.push_back(params_of(s));
    }
  }));
  for (int t = 0; t < warmup; ++t)
    expect_bitwise(got.params[static_cast<size_t>(t)], want[static_cast<size_t>(t)],
                   ("warm-up step " + std::to_string(t)).c_str());
  EXPECT_NE(got.params[warmup], got.params[warmup - 1]) << "the first local step did nothing";
}

// With plain SGD (no momentum) an average of N updated copies is the update by the
// average gradient: H = 1 is DDP, up to the order of the sums (tolerance as above).
TEST(LocalSgd, PeriodOneWithPlainSgdIsDdp) {
  StepOptions o = options("sgd");
  o.optimizer.momentum = 0;
  const int n = 2, steps = 4;
  const Trace got = run_local_sgd(small_mlp(), o, n, steps, {.period = 1});
  std::vector<float> want;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    Ddp s(train::build_model(small_mlp()).module, o, group);
    for (int t = 0; t < steps; ++t)
      s.step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
    const std::lock_guard lock(mu);
    if (group->rank() == 0) want = params_of(s);
  }));
  const float tol = 1e-5f * largest(want);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.params.back()[i], want[i], tol) << "parameter float " << i;
}

// A local step accumulates its micro-batches as DDP does (Strategy::accumulate_micro_batches,
// each micro-batch mean scaled by 1/m): with plain SGD (nothing normalises the step's size)
// and the small MLP (no batch norm, no dropout), 2 or 4 micro-batches give the step of the
// whole shard, so the hand-made reference without accumulation, within its tolerance. A sum
// of the micro-batch means (a step m times too long) moves parameters by 1e-3 or more.
TEST(LocalSgd, AccumulatedMicroBatchesEqualTheWholeShard) {
  StepOptions o = options("sgd");
  o.optimizer.momentum = 0;
  o.optimizer.weight_decay = 0;
  const int n = 2, steps = 4, period = 2;
  const auto want = by_hand(small_mlp(), o, n, steps, period);
  for (int m : {2, 4}) {
    StepOptions accumulating = o;
    accumulating.accumulate_steps = m;
    const Trace got = run_local_sgd(small_mlp(), accumulating, n, steps, {.period = period});
    for (size_t t = 0; t < want.size(); ++t) {
      const float tol = 1e-5f * largest(want[t]);
      for (size_t i = 0; i < want[t].size(); ++i)
        ASSERT_NEAR(got.params[t][i], want[t][i], tol)
            << m << " micro-batches, step " << t << ", parameter float " << i;
    }
  }
}

// Between averages the ranks differ; synchronize() gives all of them the mean of their
// parameters, buffers (batch norm's running statistics) and momentum, bit for bit alike.
TEST(LocalSgd, SynchronizeLeavesOneModelAndOneOptimizerState) {
  const int n = 2;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    LocalSgd s(train::build_model(small_cnn()).module, options("sgd"), group, {.period = 100});
    for (int t = 0; t < 2; ++t) s.step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
    const int64_t size = s.params().size();
    ASSERT_FALSE(same_bits_on_every_rank(s, s.params().params(), size));
    // The expected mean, from the ranks' parameters before the average (sum over ranks in
    // double, to compare within float rounding).
    std::vector<double> mean(s.params().params(), s.params().params() + size);
    s.sum_over_ranks(mean.data(), mean.size(), "expected mean");
    s.synchronize();
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), size));
    for (int64_t i = 0; i < size; ++i)
      ASSERT_NEAR(s.params().params()[i], mean[static_cast<size_t>(i)] / n, 1e-6) << i;
    for (const nn::NamedBuffer& b : s.params().buffers()) {
      if (b.value.dtype() == DType::f32) {
        EXPECT_TRUE(same_bits_on_every_rank(s, b.value.f32(), b.value.numel())) << b.name;
      }
    }
    for (const auto& [name, t] : s.optimizer().state()) {
      if (t.dtype() == DType::f32) {
        EXPECT_TRUE(same_bits_on_every_rank(s, t.f32(), t.numel())) << name;
      }
    }
    EXPECT_EQ(s.averages(), 0);
  }));
}

// A convolution with batch norm and no dropout (so a one-process model on a rank's shard
// draws nothing a rank would draw otherwise): its running mean and variance are buffers
// each rank updates from its own batches.
json batchnorm_cnn() {
  return json::parse(R"({"input": [12, 12, 1], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "stride": 2}, {"type": "batchnorm"},
      {"type": "relu"}, {"type": "flatten"}, {"type": "linear", "out_features": 10}]})");
}

// The f32 buffers (running statistics), concatenated in ParamSet order.
std::vector<float> float_buffers(const Strategy& s) {
  std::vector<float> out;
  for (const nn::NamedBuffer& b : s.params().buffers())
    if (b.value.dtype() == DType::f32)
      out.insert(out.end(), b.value.f32(), b.value.f32() + b.value.numel());
  return out;
}

// The periodic average replaces the running statistics by their mean over ranks, with the
// parameters (local_sgd.h). Reference: N one-process models on their shards, parameters
// and statistics averaged by hand every H steps. Rank 0's statistics after every step
// agree within float rounding of the averages' sums (1e-5 of the largest); every rank holds
// the same bits after an average; and the ranks' statistics before it differed by far
// more than that, so an average that skips them (each rank keeping its own) fails.
TEST(LocalSgd, PeriodicAverageAveragesBatchNormStatistics) {
  const int n = 2, period = 2, steps = 4;
  StepOptions o = options("sgd");
  std::vector<std::vector<float>> got(steps);
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    LocalSgd s(train::build_model(batchnorm_cnn()).module, o, group, {.period = period});
    for (int t = 0; t < steps; ++t) {
      s.step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
      const std::vector<float> mine = float_buffers(s);
      const bool averaged = (t + 1) % period == 0;
      EXPECT_EQ(same_bits_on_every_rank(s, mine.data(), static_cast<int64_t>(mine.size())),
                averaged)
          << "rank " << group->rank() << " step " << t;
      if (group->rank() == 0) {
        const std::lock_guard lock(mu);
        got[static_cast<size_t>(t)] = mine;
      }
    }
  }));

  std::vector<std::unique_ptr<SingleProcess>> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(std::make_unique<SingleProcess>(train::build_model(batchnorm_cnn()).module, o));
  for (int t = 0; t < steps; ++t) {
    for (int r = 0; r < n; ++r) ranks[r]->step(shard(global_batch(kBatch, t), r, n), kLr, t);
    if ((t + 1) % period == 0) {
      const std::vector<float> before = float_buffers(*ranks[0]);
      const int64_t size = ranks[0]->params().size();
      for (int64_t i = 0; i < size; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += ranks[r]->params().params()[i];
        for (int r = 0; r < n; ++r) ranks[r]->params().params()[i] = sum / static_cast<float>(n);
      }
      for (size_t b = 0; b < ranks[0]->params().buffers().size(); ++b) {
        if (ranks[0]->params().buffers()[b].value.dtype() != DType::f32) continue;
        const int64_t count = ranks[0]->params().buffers()[b].value.numel();
        for (int64_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += ranks[r]->params().buffers()[b].value.f32()[i];
          for (int r = 0; r < n; ++r)
            ranks[r]->params().buffers()[b].value.f32()[i] = sum / static_cast<float>(n);
        }
      }
      const std::vector<float> mean = float_buffers(*ranks[0]);
      float apart = 0;
      for (size_t i = 0; i < mean.size(); ++i)
        apart = std::max(apart, std::fabs(mean[i] - before[i]));
      ASSERT_GT(apart, 100 * 1e-5f * largest(mean)) << "the ranks' statistics hardly differ";
    }
    const std::vector<float> want = float_buffers(*ranks[0]);
    const std::vector<float>& mine = got[static_cast<size_t>(t)];
    ASSERT_EQ(mine.size(), want.size());
    ASSERT_FALSE(want.empty());
    const float tol = 1e-5f * largest(want);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(mine[i], want[i], tol) << "step " << t << ", buffer float " << i;
  }
}

TEST(LocalSgd, BadOptionsAreRefusedNamingThem) {
  rethrow_first(run_group(1, [&](comm::Group& world) {
    auto group = world.split(0, 0);
    try {
      LocalSgd s(train::build_model(small_mlp()).module, options("sgd"), group, {.period = 0});
      ADD_FAILURE() << "period 0 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("period must be >= 1"), std::string::npos) << e.what();
    }
  }));
}

}  // namespace
}  // namespace braid::parallel
