// Parameter-server workers and servers as threads over the in-process transport: sync mode
// with W workers equals one process on the W-times batch (SGD with momentum, Adam: the
// servers' optimizer), async applies every push exactly once, SSP never applies a gradient
// staler than its bound, and a sync step with a backup worker goes on without the last.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>

#include "comm/inproc_ranks.h"
#include "parallel/ps_server.h"
#include "parallel/ps_worker.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int64_t kBatch = 16;

struct Outcome {
  std::vector<float> params;      // worker 0's after a final pull
  std::vector<int64_t> versions;  // per server
  std::vector<std::vector<int64_t>> histograms;
  std::vector<int64_t> dropped;
  size_t most_pull_bytes_in_flight = 0;   // worker 0's
  std::vector<int64_t> range_bytes;       // per server
  std::vector<size_t> credit_candidates;  // worker 0's tuner's, when it tuned the credit
  std::optional<size_t> credit_chosen;
};

std::vector<optim::Segment> segments_of(const json& model, const StepOptions& o) {
  SingleProcess s(train::build_model(model).module, o);
  return s.optimizer().segments();
}

int64_t buffer_size_of(const json& model, const StepOptions& o) {
  SingleProcess s(train::build_model(model).module, o);
  return s.params().size();
}

constexpr size_t kTunedCredit = ~size_t{0};  // run_ps: the worker tunes its pull credit

// W workers and S servers; worker w trains on shard w of each step's global batch.
Outcome run_ps(const json& model, const StepOptions& o, int workers, int servers, int steps,
               PsRules rules, size_t pull_credit = 0) {
  rules.workers = workers;
  const PsLayout layout{workers, servers};
  const auto segments = segments_of(model, o);
  const int64_t size = buffer_size_of(model, o);
  Outcome out;
  out.versions.assign(static_cast<size_t>(servers), 0);
  out.histograms.resize(static_cast<size_t>(servers));
  out.dropped.assign(static_cast<size_t>(servers), 0);
  std::mutex mu;
  const auto results = run_group(workers + servers, [&](comm::Group& g) {
    auto world = g.split(0, g.rank());
    if (layout.is_worker(world->rank())) {
      PsWorker w(train::build_model(model).module, o, world, layout);
      if (pull_credit == kTunedCredit)
        w.tune_pull_credit();
      else
        w.set_pull_credit(pull_credit);
      for (int t = 0; t < steps; ++t)
        w.step(shard(global_batch(kBatch, t), world->rank(), workers), kLr, t);
      w.synchronize();  // every worker, as the trainer calls it
      if (world->rank() == 0) {
        const std::lock_guard lock(mu);
        out.params = params_of(w);
        out.most_pull_bytes_in_flight = w.most_pull_bytes_in_flight();
        if (const PartitionTuner* t = w.pull_tuner()) {
          out.credit_candidates = t->candidates();
          if (t->done()) out.credit_chosen = t->chosen();
        }
        for (const KeyRange& r : w.ranges())
          out.range_bytes.push_back(r.size() * static_cast<int64_t>(sizeof(float)));
      }
      w.finish();
      return;
    }
    const int index = world->rank() - workers;
    PsServerOptions so;
    so.layout = layout;
    so.server = index;
    so.segments = segments;
    so.buffer_size = size;
    so.optimizer = o.optimizer;
    so.rules = rules;
    PsServer server(world, std::move(so));
    server.run();
    const std::lock_guard lock(mu);
    out.versions[static_cast<size_t>(index)] = server.shard().version();
    out.histograms[static_cast<size_t>(index)] = server.shard().staleness_histogram();
    out.dropped[static_cast<size_t>(index)] = server.shard().dropped();
  });
  for (size_t r = 0; r < results.size(); ++r)
    if (results[r]) ADD_FAILURE() << "rank " << r << ": " << comm::testing::message(results[r]);
  rethrow_first(results);
  return out;
}

// Sync PS computes the global batch's mean gradient as the mean of W shards' means (summed
// on the server in arrival order), then the same optimizer update: one process on the
// global batch up to rounding, as DDP (ddp_test.cpp's tolerance and its reasoning).
TEST(Ps, SyncEqualsOneProcessOnTheGlobalBatch) {
  for (const char* opt : {"sgd", "adam"}) {
    for (const auto& [workers, servers] : {std::pair{2, 1}, {2, 2}, {4, 3}}) {
      StepOptions o = options(opt);
      SingleProcess one(train::build_model(small_mlp()).module, o);
      for (int t = 0; t < 4; ++t) one.step(global_batch(kBatch, t), kLr, t);
      const auto want = params_of(one);
      const Outcome got = run_ps(small_mlp(), o, workers, servers, 4, {.mode = PsMode::sync});
      ASSERT_EQ(got.params.size(), want.size());
      const float tol = 1e-5f * largest(want);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got.params[i], want[i], tol)
            << opt << ", " << workers << " workers, " << servers << " servers, float " << i;
      for (int64_t v : got.versions) EXPECT_EQ(v, 4);
    }
  }
}

// Priority pulls (scheduler.priority): with a credit of one byte a worker has one range
// requested at a time, in layer order, and the run's result is the plain run's bit for bit
// (2 workers: each server adds two pushes, in either order the same sum).
TEST(Ps, PriorityPullsRequestOneRangeAtATimeAndChangeNothing) {
  const StepOptions o = options("adam");
  const Outcome plain = run_ps(small_mlp(), o, 2, 3, 4, {.mode = PsMode::sync});
  const Outcome priority = run_ps(small_mlp(), o, 2, 3, 4, {.mode = PsMode::sync}, 1);
  ASSERT_EQ(priority.params.size(), plain.params.size());
  EXPECT_EQ(
      std::memcmp(priority.params.data(), plain.params.data(), plain.params.size() * sizeof(float)),
      0);
  const int64_t largest = *std::max_element(plain.range_bytes.begin(), plain.range_bytes.end());
  int64_t total = 0;
  for (const int64_t b : plain.range_bytes) total += b;
  EXPECT_EQ(static_cast<int64_t>(priority.most_pull_bytes_in_flight), largest);
  EXPECT_EQ(static_cast<int64_t>(plain.most_pull_bytes_in_flight), total);
}

// A tuned credit (scheduler.partition_mb 0) tries every range at once, a quarter of the
// bytes, then one range at a time, 4 steps each (1 settling, 3 timed), and keeps one; which
// one depends on the times, and the result is the plain run's bit for bit whichever it is.
TEST(Ps, TunedPullCreditTriesEachCandidateAndChangesNothing) {
  const StepOptions o = options("adam");
  const int steps = 14;  // the search's 12 and two with the choice
  const Outcome plain = run_ps(small_mlp(), o, 2, 3, steps, {.mode = PsMode::sync});
  const Outcome tuned = run_ps(small_mlp(), o, 2, 3, steps, {.mode = PsMode::sync}, kTunedCredit);
  ASSERT_EQ(tuned.params.size(), plain.params.size());
  EXPECT_EQ(
      std::memcmp(tuned.params.data(), plain.params.data(), plain.params.size() * sizeof(float)),
      0);
  int64_t total = 0;
  for (const int64_t b : plain.range_bytes) total += b;
  const auto largest =
      static_cast<size_t>(*std::max_element(plain.range_bytes.begin(), plain.range_bytes.end()));
  const auto all = static_cast<size_t>(total);
  // This model's first server holds most of it (its first layer), so a quarter of the bytes
  // is less than that range and means one range at a time: a candidate of its own no more.
  ASSERT_GT(largest, all / 4);
  EXPECT_EQ(tuned.credit_candidates, (std::vector<size_t>{all, largest}));
  ASSERT_TRUE(tuned.credit_chosen.has_value()) << "the search ends after 12 steps";
  EXPECT_NE(std::find(tuned.credit_candidates.begin(), tuned.credit_candidates.end(),
                      *tuned.credit_chosen),
            tuned.credit_candidates.end());
  // The first candidate is every range at once.
  EXPECT_EQ(static_cast<int64_t>(tuned.most_pull_bytes_in_flight), total);
}

// A worker whose run raises an error tells the servers it failed (its destructor runs as
// the error unwinds) and is never counted as finished: sync mode cannot go on without it and
// the server's error names it; async goes on without a failed worker, but not without its
// chief (worker 0), which saves the run.
TEST(Ps, AWorkerThatFailsIsNeverCountedAsFinished) {
  struct Injected {};
  const json model = small_mlp();
  const StepOptions o = options("sgd");
  for (const PsMode mode : {PsMode::sync, PsMode::async}) {
    for (const int failing : {0, 1}) {
      const PsLayout layout{2, 1};
      std::vector<std::string> lost;
      const auto results = run_group(3, [&](comm::Group& g) {
        auto world = g.split(0, g.rank());
        if (layout.is_worker(world->rank())) {
          try {
            PsWorker w(train::build_model(model).module, o, world, layout);
            for (int t = 0; t < 4; ++t) {
              w.step(shard(global_batch(kBatch, t), world->rank(), 2), kLr, t);
              if (world->rank() == failing && t == 1) throw Injected{};
            }
            w.finish();
          } catch (const Injected&) {
          }
          return;
        }
        PsServerOptions so;
        so.layout = layout;
        so.segments = segments_of(model, o);
        so.buffer_size = buffer_size_of(model, o);
        so.optimizer = o.optimizer;
        so.rules = {.mode = mode, .workers = 2};
        PsServer server(world, std::move(so));
        server.run();
        lost = server.stats().lost;
      });
      const std::string what =
          std::string(ps_mode_name(mode)) + ", worker " + std::to_string(failing) + " failing";
      if (mode == PsMode::async && failing == 1) {
        ASSERT_FALSE(results[2]) << what << ": " << comm::testing::message(results[2]);
        ASSERT_EQ(lost.size(), 1u) << what;
        EXPECT_NE(lost[0].find("worker 1: its run failed"), std::string::npos) << lost[0];
        continue;
      }
      ASSERT_TRUE(results[2]) << what << ": the server finished as if the run were complete";
      const std::string error = comm::testing::message(results[2]);
      EXPECT_NE(error.find(failing == 0 && mode == PsMode::async
                               ? "the chief (worker 0) did not finish its run"
                               : "worker " + std::to_string(failing) + " is gone"),
                std::string::npos)
          << what << ": " << error;
      EXPECT_NE(error.find("its run failed"), std::string::npos) << what << ": " << error;
    }
  }
}

TEST(Ps, AsyncAppliesEveryPushExactlyOnce) {
  const int workers = 2, servers = 2, steps = 5;
  const Outcome got =
      run_ps(small_mlp(), options("sgd"), workers, servers, steps, {.mode = PsMode::async});
  for (size_t s = 0; s < got.versions.size(); ++s) {
    EXPECT_EQ(got.versions[s], workers * steps) << "server " << s;
    int64_t applied = 0;
    for (int64_t c : got.histograms[s]) applied += c;
    EXPECT_EQ(applied, workers * steps) << "server " << s;
  }
}

TEST(Ps, SspNeverAppliesAGradientStalerThanItsBoundAllows) {
  // Worker w pulls step t only while the slowest has pushed t - s steps, so between its
  // pull and its push each other worker pushes at most steps t - s .. t + s: a gradient is
  // at most (W - 1)(2s + 1) updates stale.
  const int workers = 3, servers = 1, steps = 6, bound = 1;
  const Outcome got = run_ps(small_mlp(), options("sgd"), workers, servers, steps,
                             {.mode = PsMode::ssp, .staleness_bound = bound});
  const auto& h = got.histograms[0];
  const int64_t limit = (workers - 1) * (2 * bound + 1);
  for (size_t k = static_cast<size_t>(limit) + 1; k < h.size(); ++k)
    EXPECT_EQ(h[k], 0) << "a gradient " << k << " updates stale was applied";
  EXPECT_EQ(got.versions[0], workers * steps);
}

TEST(Ps, SyncWithABackupWorkerStepsOnTheFirstWMinusOne) {
  const int workers = 3, steps = 4;
  const Outcome got = run_ps(small_mlp(), options("sgd"), workers, 1, steps,
                             {.mode = PsMode::sync, .backup_workers = 1});
  EXPECT_EQ(got.versions[0], steps);
  // Each step's third gradient arrived after the step was applied: dropped, never applied.
  EXPECT_EQ(got.dropped[0], steps);
}

}  // namespace
// ps-lite's calls: a pull started after a push, waited for first, already sees the push
// applied (a server takes one worker's messages in order), on every server; a second pull
// before the first is waited for is refused.
TEST(Ps, TimestampedPullStartedAfterAPushSeesIt) {
  const StepOptions o = options("sgd");
  const PsLayout layout{1, 2};
  const auto segments = segments_of(small_mlp(), o);
  const int64_t size = buffer_size_of(small_mlp(), o);
  const auto results = run_group(3, [&](comm::Group& g) {
    auto world = g.split(0, g.rank());
    if (layout.is_worker(world->rank())) {
      PsWorker w(train::build_model(small_mlp()).module, o, world, layout);
      w.pull(0);
      std::fill(w.params().grads(), w.params().grads() + w.params().size(), 1.0f);
      const int pushed = w.start_push(kLr, 0);
      const int pulled = w.start_pull(1);
      EXPECT_THROW(w.start_pull(2), Error);
      w.wait(pulled);
      w.wait(pushed);
      for (const int64_t v : w.versions()) EXPECT_EQ(v, 1);
      EXPECT_THROW(w.wait(pushed), Error);
      w.finish();
      return;
    }
    PsServerOptions so;
    so.layout = layout;
    so.server = world->rank() - 1;
    so.segments = segments;
    so.buffer_size = size;
    so.optimizer = o.optimizer;
    so.rules = PsRules{.mode = PsMode::async, .workers = 1};
    PsServer server(world, std::move(so));
    server.run();
    EXPECT_EQ(server.shard().version(), 1);
  });
  for (size_t r = 0; r < results.size(); ++r)
    if (results[r]) ADD_FAILURE() << "rank " << r << ": " << comm::testing::message(results[r]);
}

}  // namespace braid::parallel
