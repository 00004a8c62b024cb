// A parameter server's shard against hand-computed updates: sync steps are the mean of the
// first W - b gradients (late ones dropped), async updates apply on arrival with their
// staleness recorded (and the rate divided by 1 + staleness when asked), SSP holds back a
// worker too far ahead of the slowest, and the optimizer over a range equals the same
// optimizer over the whole buffer, sliced.
#include "parallel/ps_shard.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace braid::parallel {
namespace {

// Two tensors, [0, 4) and [4, 10), the shard holding both.
std::vector<optim::Segment> two_tensors() { return {{"a", 0, 4, true}, {"b", 4, 6, false}}; }
constexpr KeyRange kAll{0, 10};

optim::OptimizerConfig plain_sgd() {
  optim::OptimizerConfig c;
  c.name = "sgd";
  c.momentum = 0;
  return c;
}

std::vector<float> filled(float v, size_t n = 10) { return std::vector<float>(n, v); }

PsShard shard(PsRules rules, const optim::OptimizerConfig& opt = plain_sgd()) {
  const auto segs = two_tensors();
  const auto init = filled(1.0f);
  return PsShard(kAll, segs, init, opt, rules);
}

TEST(PsShard, SyncAppliesTheMeanOnceEveryWorkerPushed) {
  PsShard s = shard({.mode = PsMode::sync, .workers = 3});
  EXPECT_FALSE(s.may_pull(1));
  EXPECT_EQ(s.push({.worker = 0, .step = 0, .lr = 0.5f}, filled(1.0f)), 0);
  EXPECT_EQ(s.push({.worker = 2, .step = 0, .lr = 0.5f}, filled(2.0f)), 0);
  EXPECT_EQ(s.params()[0], 1.0f) << "applied before every worker pushed";
  EXPECT_EQ(s.push({.worker = 1, .step = 0, .lr = 0.5f}, filled(6.0f)), 1);
  // 1 - 0.5 * (1 + 2 + 6) / 3
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, -0.5f);
  EXPECT_EQ(s.version(), 1);
  EXPECT_TRUE(s.may_pull(1));
  EXPECT_EQ(s.staleness_histogram()[0], 1);
}

TEST(PsShard, SyncWithABackupWorkerDropsTheLateGradient) {
  PsShard s = shard({.mode = PsMode::sync, .workers = 3, .backup_workers = 1});
  s.push({.worker = 1, .step = 0, .lr = 1.0f}, filled(2.0f));
  EXPECT_EQ(s.push({.worker = 0, .step = 0, .lr = 1.0f}, filled(4.0f)), 1);
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, 1.0f - 3.0f);
  EXPECT_EQ(s.push({.worker = 2, .step = 0, .lr = 1.0f}, filled(100.0f)), 0);
  EXPECT_EQ(s.dropped(), 1);
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, -2.0f) << "a late gradient was applied";
  EXPECT_EQ(s.version(), 1);
}

TEST(PsShard, AsyncAppliesOnArrivalAndRecordsStaleness) {
  PsShard s = shard({.mode = PsMode::async, .workers = 2});
  s.push({.worker = 0, .step = 0, .based_on = 0, .lr = 0.1f}, filled(1.0f));  // staleness 0
  s.push({.worker = 1, .step = 0, .based_on = 0, .lr = 0.1f}, filled(1.0f));  // 1
  s.push({.worker = 0, .step = 1, .based_on = 1, .lr = 0.1f}, filled(1.0f));  // 1
  EXPECT_EQ(s.version(), 3);
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, 1.0f - 0.3f);
  EXPECT_EQ(s.staleness_histogram()[0], 1);
  EXPECT_EQ(s.staleness_histogram()[1], 2);
  EXPECT_TRUE(s.may_pull(100));
}

TEST(PsShard, StalenessAwareRateDividesByOnePlusStaleness) {
  PsShard s = shard({.mode = PsMode::async, .workers = 2, .staleness_lr = true});
  s.push({.worker = 0, .step = 0, .based_on = 0, .lr = 0.4f}, filled(1.0f));  // 0.4
  s.push({.worker = 1, .step = 0, .based_on = 0, .lr = 0.4f}, filled(1.0f));  // 0.2
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, 1.0f - 0.6f);
}

// A restarted worker's step (rejoin_worker): async its own pushes, ssp not behind the
// slowest live worker, sync the open step; it counts again in each.
TEST(PsShard, ARestartedWorkerGoesOnAtItsOwnStepTheSlowestsOrTheOpenOne) {
  PsShard async = shard({.mode = PsMode::async, .workers = 2});
  for (int64_t t = 0; t < 3; ++t) async.push({.worker = 0, .step = t, .lr = 0.1f}, filled(0.0f));
  async.push({.worker = 1, .step = 0, .lr = 0.1f}, filled(0.0f));
  async.lose_worker(1);
  EXPECT_EQ(async.rejoin_worker(1), 1) << "async: the steps it pushed, nothing skipped";
  EXPECT_EQ(async.live_workers(), 2);

  PsShard ssp = shard({.mode = PsMode::ssp, .workers = 3, .staleness_bound = 1});
  for (int w = 0; w < 2; ++w)
    for (int64_t t = 0; t < 4; ++t) ssp.push({.worker = w, .step = t, .lr = 0.1f}, filled(0.0f));
  ssp.push({.worker = 2, .step = 0, .lr = 0.1f}, filled(0.0f));
  ssp.lose_worker(2);
  EXPECT_EQ(ssp.rejoin_worker(2), 4) << "ssp: at the slowest live worker, nobody waits for it";
  EXPECT_EQ(ssp.clock(2), 4);
  EXPECT_TRUE(ssp.may_pull(5)) << "the rejoined worker holds the others back";

  PsShard sync = shard({.mode = PsMode::sync, .workers = 3, .backup_workers = 1});
  sync.lose_worker(2);
  for (int64_t t = 0; t < 2; ++t)
    for (int w = 0; w < 2; ++w) sync.push({.worker = w, .step = t, .lr = 0.1f}, filled(0.0f));
  EXPECT_EQ(sync.rejoin_worker(2), 2) << "sync: the open step";
  EXPECT_EQ(sync.live_workers(), 3);
  EXPECT_EQ(sync.push({.worker = 2, .step = 2, .lr = 0.1f}, filled(0.0f)), 0);
  EXPECT_EQ(sync.push({.worker = 0, .step = 2, .lr = 0.1f}, filled(0.0f)), 1)
      << "its gradient counts in the open step";
}

TEST(PsShard, SspHoldsBackAWorkerTooFarAheadOfTheSlowest) {
  PsShard s = shard({.mode = PsMode::ssp, .workers = 2, .staleness_bound = 1});
  EXPECT_TRUE(s.may_pull(0));
  EXPECT_TRUE(s.may_pull(1));  // one ahead of a worker that pushed nothing
  s.push({.worker = 0, .step = 0, .lr = 0.1f}, filled(1.0f));
  s.push({.worker = 0, .step = 1, .lr = 0.1f}, filled(1.0f));
  EXPECT_FALSE(s.may_pull(2)) << "worker 0 would be 2 steps ahead of worker 1";
  s.push({.worker = 1, .step = 0, .lr = 0.1f}, filled(1.0f));
  EXPECT_TRUE(s.may_pull(2));
  EXPECT_FALSE(s.may_pull(3));
  s.lose_worker(1);  // the slowest is gone: worker 0 alone sets the pace
  EXPECT_TRUE(s.may_pull(3));
}

TEST(PsShard, SyncWithoutBackupsCannotLoseAWorker) {
  PsShard s = shard({.mode = PsMode::sync, .workers = 2});
  try {
    s.lose_worker(1);
    FAIL() << "sync mode went on without a worker and without backups";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1 is gone"), std::string::npos) << e.what();
  }
  PsShard b = shard({.mode = PsMode::sync, .workers = 2, .backup_workers = 1});
  b.lose_worker(1);
  EXPECT_EQ(b.push({.worker = 0, .step = 0, .lr = 1.0f}, filled(1.0f)), 1);
}

// The shard's optimizer over its range (tensors rebased) is the whole buffer's optimizer,
// sliced: Adam over [4, 10) of a 10-float buffer gives the bits of Adam over all 10.
TEST(PsShard, TheRangesOptimizerIsTheWholeBuffersSliced) {
  optim::OptimizerConfig adam;
  adam.name = "adam";
  adam.weight_decay = 0.01;
  const auto segs = two_tensors();
  std::vector<float> whole(10);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = 0.1f * static_cast<float>(i);
  auto reference = optim::make_optimizer(adam, segs, 10);
  const KeyRange second{4, 10};
  PsShard s(second, segs, std::span<const float>(whole).subspan(4), adam,
            {.mode = PsMode::async, .workers = 1});
  for (int t = 0; t < 3; ++t) {
    std::vector<float> g(10);
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i + t) - 4.5f;
    reference->step(whole.data(), g.data(), 0.01f);
    s.push({.worker = 0, .step = t, .based_on = t, .lr = 0.01f},
           std::span<const float>(g).subspan(4));
  }
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(s.params()[i], whole[4 + i]) << i;
}

TEST(PsShard, BadRulesAreRefusedNamingTheKey) {
  const auto message = [](PsRules r) {
    try {
      validate(r);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.workers = 2, .backup_workers = 2}).find("ps.backup_workers is 2"),
            std::string::npos);
  EXPECT_NE(message({.mode = PsMode::async, .workers = 2, .backup_workers = 1})
                .find("backup workers belong to sync mode"),
            std::string::npos);
  EXPECT_NE(message({.mode = PsMode::ssp, .workers = 2, .staleness_bound = -1})
                .find("ps.staleness_bound is -1"),
            std::string::npos);
  EXPECT_NE(message({.workers = 2, .staleness_lr = true}).find("ps.staleness_lr"),
            std::string::npos);
  EXPECT_THROW(parse_ps_mode("bsp"), Error);
  EXPECT_EQ(parse_ps_mode("ssp"), PsMode::ssp);
}

// Federated rounds: the pushes are weighted sums of model changes; the round applies the
// weighted mean (sum / sum of weights) through the server optimizer once every live worker
// pushed, and a lost worker leaves the round to the others instead of failing it.
TEST(PsShard, FederatedRoundAppliesTheWeightedMeanChange) {
  PsRules rules{.mode = PsMode::sync, .workers = 2};
  rules.federated = ServerOptimizerOptions{.kind = ServerOptimizerKind::avg, .lr = 1.0f};
  PsShard s = shard(rules);
  // Worker 0's clients: 30 samples moved the model by +0.2 each (sum 6); worker 1's 10
  // samples by -0.2 each (sum -2): the mean change is (6 - 2) / 40 = 0.1.
  EXPECT_EQ(s.push({.worker = 0, .step = 0, .lr = 0.1f, .weight = 30}, filled(6.0f)), 0);
  EXPECT_EQ(s.push({.worker = 1, .step = 0, .lr = 0.1f, .weight = 10}, filled(-2.0f)), 1);
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, 1.1f);
  EXPECT_TRUE(s.may_pull(1));
}

TEST(PsShard, FederatedRoundGoesOnWithoutALostWorker) {
  PsRules rules{.mode = PsMode::sync, .workers = 3};
  rules.federated = ServerOptimizerOptions{.kind = ServerOptimizerKind::avg, .lr = 1.0f};
  PsShard s = shard(rules);
  EXPECT_EQ(s.push({.worker = 0, .step = 0, .weight = 10}, filled(1.0f)), 0);
  EXPECT_EQ(s.push({.worker = 2, .step = 0, .weight = 10}, filled(3.0f)), 0);
  s.lose_worker(1);  // the round completes with the two that pushed: (1 + 3) / 20
  EXPECT_EQ(s.version(), 1);
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, 1.2f);
  EXPECT_EQ(s.push({.worker = 0, .step = 1, .weight = 5}, filled(1.0f)), 0);
  EXPECT_EQ(s.push({.worker = 2, .step = 1, .weight = 5}, filled(1.0f)), 1);
  for (float p : s.params()) EXPECT_FLOAT_EQ(p, 1.4f);
}

TEST(PsShard, FederatedServerStateSurvivesASnapshot) {
  PsRules rules{.mode = PsMode::sync, .workers = 1};
  rules.federated =
      ServerOptimizerOptions{.kind = ServerOptimizerKind::avgm, .lr = 1.0f, .momentum = 0.5f};
  PsShard a = shard(rules), b = shard(rules);
  a.push({.worker = 0, .step = 0, .weight = 1}, filled(1.0f));
  b.restore(a.snapshot());
  a.push({.worker = 0, .step = 1, .weight = 1}, filled(1.0f));
  b.push({.worker = 0, .step = 1, .weight = 1}, filled(1.0f));
  // m = 1, then 0.5 + 1: 1 + 1 + 1.5 with the momentum carried over.
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_FLOAT_EQ(a.params()[i], 3.5f);
    EXPECT_EQ(a.params()[i], b.params()[i]);
  }
}

}  // namespace
}  // namespace braid::parallel
