// Uneven shares of a global batch (share_weight.h, data::batch_share), with ranks as threads
// over the in-process transport: 3 ranks sharing G = 12 (4, 4, 4) keep today's bits; sharing
// G = 10 (4, 3, 3) they match one process on the batch of 10 within rounding, under DDP,
// ZeRO stages 1-3 and local SGD (H = 1, plain SGD); deterministic mode repeats its bits;
// a batch that is not the rank's share is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <mutex>

#include "comm/inproc_ranks.h"
#include "data/sampler.h"
#include "parallel/ddp.h"
#include "parallel/local_sgd.h"
#include "parallel/share_weight.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"
#include "parallel/zero.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::message;
using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int kRanks = 3;
constexpr int kSteps = 3;

// Rank r of w's share of the global batch g, as the step-block sampler deals it: rows
// r, r + w, ... while below g.size (batch_share(g.size, r, w) of them).
data::Batch uneven_shard(const data::Batch& g, int r, int w) {
  const int64_t rows = data::batch_share(g.size, r, w);
  data::Batch b;
  b.size = rows;
  b.inputs = Tensor::empty(Shape{rows, 12, 12, 1});
  b.targets = Tensor::empty(Shape{rows}, DType::i32);
  const int64_t row = 144;
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(b.inputs.f32() + i * row, g.inputs.f32() + (r + i * w) * row, row * sizeof(float));
    b.targets.data<int32_t>()[i] = g.targets.data<int32_t>()[r + i * w];
  }
  return b;
}

// 0: DDP; 1-3: ZeRO at that stage; 4: local SGD averaging every step.
enum Kind { kDdp = 0, kLocalSgd = 4 };

std::string kind_name(int kind) {
  return kind == kDdp ? "ddp" : kind == kLocalSgd ? "local_sgd" : "zero " + std::to_string(kind);
}

std::unique_ptr<Strategy> make(int kind, const json& model, const StepOptions& o,
                               std::shared_ptr<comm::Group> group, int64_t global) {
  auto module = train::build_model(model).module;
  // Small buckets: several per model, cut into chunks that end inside layers.
  if (kind == kDdp || kind == kLocalSgd) {
    DdpOptions d;
    d.bucket_bytes = 1000;
    d.first_bucket_bytes = 600;
    d.global_batch = global;
    if (kind == kDdp) return std::make_unique<Ddp>(std::move(module), o, std::move(group), d);
    return std::make_unique<LocalSgd>(std::move(module), o, std::move(group),
                                      LocalSgdOptions{.period = 1}, d);
  }
  ZeroOptions z;
  z.stage = kind;
  z.bucket_bytes = 1000;
  z.first_bucket_bytes = 600;
  z.global_batch = global;
  return std::make_unique<Zero>(std::move(module), o, std::move(group), z);
}

// kSteps steps on kRanks thread-ranks, each on its share of global batches of `rows`,
// the strategy told the global batch `global` (0: none). Rank 0's parameters; checks that
// every rank holds the same bits after every step.
std::vector<float> run(int kind, const json& model, const StepOptions& o, int64_t rows,
                       int64_t global) {
  std::vector<float> out;
  std::mutex mu;
  rethrow_first(run_group(kRanks, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    const int r = group->rank();
    auto s = make(kind, model, o, group, global);
    for (int t = 0; t < kSteps; ++t) {
      s->step(uneven_shard(global_batch(rows, t), r, kRanks), kLr, t);
      s->synchronize();  // stage 3: the whole parameters, on every rank
      EXPECT_TRUE(same_bits_on_every_rank(*s, s->params().params(), s->params().size()))
          << kind_name(kind) << " rank " << r << " step " << t;
    }
    if (r == 0) {
      const std::lock_guard lock(mu);
      out = params_of(*s);
    }
  }));
  return out;
}

std::vector<float> single_process(const json& model, const StepOptions& o, int64_t rows) {
  SingleProcess s(train::build_model(model).module, o);
  for (int t = 0; t < kSteps; ++t) s.step(global_batch(rows, t), kLr, t);
  return params_of(s);
}

TEST(GlobalBatch, ShareWeightIsExactlyOneForEqualShares) {
  for (const int w : {1, 2, 3, 4, 6, 12}) {
    for (int r = 0; r < w; ++r) EXPECT_EQ(share_weight(12, r, w), 1.0f) << r << " of " << w;
  }
  EXPECT_EQ(share_weight(0, 2, 3), 1.0f);
  EXPECT_FLOAT_EQ(share_weight(10, 0, 3), 1.2f);
  EXPECT_FLOAT_EQ(share_weight(10, 1, 3), 0.9f);
  EXPECT_FLOAT_EQ(share_weight(64, 0, 3), 66.0f / 64.0f);
}

// G = 12 over 3 ranks: shares of 4, weights of exactly 1, so telling the strategy the
// global batch changes nothing, with dropout and batch norm, in both modes.
TEST(GlobalBatch, EqualSharesKeepTodaysBits) {
  for (const int kind : {0, 1, 2, 3}) {
    for (const bool deterministic : {false, true}) {
      StepOptions o = options("sgd");
      o.deterministic = deterministic;
      const auto today = run(kind, small_cnn(), o, 12, 0);
      const auto shared = run(kind, small_cnn(), o, 12, 12);
      expect_bitwise(shared, today,
                     (kind_name(kind) + (deterministic ? " deterministic" : "")).c_str());
    }
  }
}

// G = 10 over 3 ranks: shares of 4, 3, 3 weighted 1.2, 0.9, 0.9, so the reduced gradient
// is the mean over the 10 samples: one process's step on the batch of 10 up to the order
// of the sums (~1e-7 relative per sum), within 1e-5 of the largest parameter after three
// steps of SGD with momentum. The unweighted mean of the ranks' means (each sample of the
// first rank counting 1/12, the others' 1/9) moves parameters by 1e-3 or more. The MLP has no
// dropout or batch norm, whose draws and statistics follow the ranks.
TEST(GlobalBatch, UnevenSharesEqualOneProcessOnTheGlobalBatch) {
  const auto want = single_process(small_mlp(), options("sgd"), 10);
  const float tol = 1e-5f * largest(want);
  for (const int kind : {0, 1, 2, 3}) {
    for (const bool deterministic : {false, true}) {
      StepOptions o = options("sgd");
      o.deterministic = deterministic;
      const auto got = run(kind, small_mlp(), o, 10, 10);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol)
            << kind_name(kind) << (deterministic ? " deterministic" : "") << ", parameter float "
            << i;
    }
  }
}

// Deterministic mode with uneven shares: one fixed order, so the same membership twice
// gives the same bits (with dropout and batch norm).
TEST(GlobalBatch, DeterministicUnevenSharesRepeatTheirBits) {
  StepOptions o = options("adamw");
  o.deterministic = true;
  for (const int kind : {0, 1, 2, 3}) {
    const auto a = run(kind, small_cnn(), o, 10, 10);
    const auto b = run(kind, small_cnn(), o, 10, 10);
    expect_bitwise(a, b, kind_name(kind).c_str());
  }
}

// Local SGD averages the ranks' models weighted by their shares: with plain SGD and H = 1
// that is the update by the weighted mean gradient, one process's on the batch of 10.
TEST(GlobalBatch, LocalSgdWeighsItsAveragesByShare) {
  StepOptions o = options("sgd");
  o.optimizer.momentum = 0;
  const auto want = single_process(small_mlp(), o, 10);
  const auto got = run(kLocalSgd, small_mlp(), o, 10, 10);
  const float tol = 1e-5f * largest(want);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "float " << i;
}

TEST(GlobalBatch, ABatchThatIsNotTheSharesIsRefused) {
  for (const int kind : {0, 1}) {
    const auto errors = run_group(kRanks, [&](comm::Group& world) {
      auto group = world.split(0, world.rank());
      auto s = make(kind, small_mlp(), options("sgd"), group, 10);
      // An even split of 12: rank 1's share of 10 is 3, but its batch holds 4.
      s->step(shard(global_batch(12, 0), group->rank(), kRanks), kLr, 0);
    });
    const std::string what = message(errors[1]);
    EXPECT_NE(what.find("rank 1 of 3 takes 3 samples of a global batch of 10, but its batch "
                        "holds 4"),
              std::string::npos)
        << kind_name(kind) << ": " << what;
  }
}

}  // namespace
}  // namespace braid::parallel
