// elastic.scale_lr at the trainer's level (what run_elastic does each round, without the
// processes): a commit taken by 3 ranks of batch 12 (global batch 36), restored on 2 ranks
// of batch 12 (global batch 24) at 2/3 of the learning rate, continues the epoch at the next
// sample, and ends with the bits of a run resumed from a checkpoint of the same step on 2
// ranks given the scaled lr by hand. Ranks are threads over the in-process transport, each
// with its own Trainer on real Fashion-MNIST.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <mutex>

#include "comm/group.h"
#include "comm/inproc_ranks.h"
#include "fashion_mnist_data.h"
#include "temp_dir.h"
#include "train/elastic_run.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;
using nlohmann::json;

constexpr int kLaunchWorld = 3;

TrainConfig job_config(const std::string& out) {
  TrainConfig c;
  c.model = json::parse(R"({"input": [28, 28, 1], "layers": [
      {"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})");
  c.batch = 12;
  c.deterministic = true;
  c.strategy = "ddp";
  c.max_steps = 12;
  c.out = out;
  c.log_every = 100;
  c.eval_batches = 1;
  c.optimizer.name = "sgd";
  c.optimizer.lr = 0.06;
  c.optimizer.momentum = 0.9;
  // Warm-up and a decay to a floor: the whole schedule is scaled, min_lr included.
  c.schedule.name = "cosine";
  c.schedule.warmup_steps = 3;
  c.schedule.min_lr = 0.001;
  c.seed = 5;
  c.elastic.scale_lr = true;
  return c;
}

std::vector<float> params_of(Trainer& t) {
  return {t.params().params(), t.params().params() + t.params().size()};
}

json loader_of(const std::string& run) {
  json state;
  std::ifstream(run + "/checkpoint/state.json") >> state;
  return state["train_state"]["loader"];
}

// An elastic round of `world` ranks: its config and lr scale, from `from` when given, run to
// `stop_at`. Returns rank 0's parameters; `commit` (when given) gets rank 0's commit of
// step `commit_at` (< stop_at), taken at that step boundary as the driver takes it.
std::vector<float> round_of(int world, const TrainConfig& job, const TrainCommit* from,
                            int64_t stop_at, int64_t commit_at = 0, TrainCommit* commit = nullptr,
                            bool scale = true) {
  std::vector<float> params;
  std::mutex mu;
  comm::testing::rethrow_first(comm::testing::run_group(world, [&](comm::Group& g) {
    Trainer t(round_config(job, kLaunchWorld, world), g.split(0, g.rank()));
    if (scale) t.set_lr_scale(round_lr_scale(job, kLaunchWorld, world));
    if (from) t.restore(*from);
    TrainCommit mine;
    t.set_step_boundary([&](int64_t step) {
      if (step == commit_at) t.commit(mine);  // not transactional: a whole copy
      return false;
    });
    t.run(stop_at);
    EXPECT_EQ(t.global_step(), stop_at);
    if (g.rank() == 0) {
      const std::lock_guard lock(mu);
      params = params_of(t);
      if (commit) *commit = mine;
    }
  }));
  return params;
}

// `world` ranks of `config` as is, resumed from the checkpoint in `from` when given.
std::vector<float> resumed_run(int world, const TrainConfig& config, const std::string& from,
                               int64_t stop_at) {
  std::vector<float> params;
  std::mutex mu;
  comm::testing::rethrow_first(comm::testing::run_group(world, [&](comm::Group& g) {
    Trainer t(config, g.split(0, g.rank()));
    if (!from.empty()) t.load_checkpoint(from);
    t.run(stop_at);
    EXPECT_EQ(t.global_step(), stop_at);
    if (g.rank() == 0) {
      const std::lock_guard lock(mu);
      params = params_of(t);
    }
  }));
  return params;
}

TEST(ElasticScaleLr, ARoundOnFewerRanksEqualsAResumeAtTheScaledLrBitwise) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string dir = tmp.path();
  EXPECT_EQ(round_config(job_config(""), kLaunchWorld, 2).global_batch, 24);
  EXPECT_DOUBLE_EQ(round_lr_scale(job_config(""), kLaunchWorld, 2), 2.0 / 3.0);

  // Rounds: 3 ranks to step 5 (sample 180), then 2 ranks from its commit to step 12.
  // 180 is 7.5 steps of 24: the 2 ranks' steps start mid-step of their grid (offset 12).
  TrainCommit commit;
  round_of(3, job_config(dir + "/round1"), nullptr, 6, 5, &commit);
  const std::vector<float> got = round_of(2, job_config(dir + "/round2"), &commit, 12);
  const json loader = loader_of(dir + "/round2");
  EXPECT_EQ(loader["samples"], 5 * 36 + 7 * 24) << loader.dump();
  EXPECT_EQ(loader["offset"], 12) << loader.dump();
  EXPECT_EQ(loader["position"], 14) << loader.dump();  // 12 + 14 x 24 = 348

  // The reference: 3 ranks to step 5, checkpointed; 2 ranks resume it at global batch 24 and
  // the scaled lr and min_lr, given as settings.
  TrainConfig first = job_config(dir + "/reference");
  first.global_batch = 36;
  resumed_run(3, first, "", 5);
  TrainConfig second = first;
  second.global_batch = 24;
  second.optimizer.lr = 0.06 * (2.0 / 3.0);
  second.schedule.min_lr = 0.001 * (2.0 / 3.0);
  const std::vector<float> want = resumed_run(2, second, dir + "/reference", 12);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  EXPECT_EQ(loader_of(dir + "/reference"), loader);

  // The comparison can fail: the same round without the scaled lr ends elsewhere.
  const std::vector<float> unscaled =
      round_of(2, job_config(dir + "/unscaled"), &commit, 12, 0, nullptr, /*scale=*/false);
  EXPECT_NE(std::memcmp(unscaled.data(), want.data(), got.size() * sizeof(float)), 0);
}

// A commit at an epoch's last step: the world that took it finished the epoch, so a round of
// a smaller global batch starts the next epoch rather than take a step of the tail. 3 ranks
// of 1900 take 10 steps (57,000 of 60,000 samples); one rank of 1900 could take one more
// step of the 3,000 left, and must not: epoch 1 follows at once, the run's last.
TEST(ElasticScaleLr, AnEpochTheWorldFinishedStaysFinished) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string dir = tmp.path();
  TrainConfig job = job_config(dir + "/a");
  job.batch = 1900;
  job.max_steps = 0;
  job.epochs = 2;
  job.schedule.name = "constant";
  job.eval_batches = 1;
  TrainCommit commit;
  round_of(3, job, nullptr, 11, 10, &commit);  // committed before its epoch closed
  job.out = dir + "/b";
  comm::testing::rethrow_first(comm::testing::run_group(1, [&](comm::Group& g) {
    Trainer t(round_config(job, kLaunchWorld, 1), g.split(0, g.rank()));
    t.set_lr_scale(round_lr_scale(job, kLaunchWorld, 1));
    t.restore(commit);
    t.run();  // to the end of the epochs
    // Epoch 1 whole (31 steps of 1900), after no step of epoch 0's tail.
    EXPECT_EQ(t.global_step(), 10 + 60000 / 1900);
    const json loader = loader_of(dir + "/b");
    EXPECT_EQ(loader["epoch"], 1) << loader.dump();
    EXPECT_EQ(loader["position"], 31) << loader.dump();
  }));
}

// The same for a checkpoint: one written at the last step of an epoch (checkpoint_every
// falls on it, before the epoch closes) resumes into the next epoch, with the bits of the
// uninterrupted run, rather than take the finished epoch again. 10 steps of 6000 an epoch.
TEST(ElasticScaleLr, ACheckpointAtAnEpochsLastStepResumesIntoTheNext) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  TrainConfig c = job_config(tmp.path() + "/straight");
  c.strategy = "single";
  c.elastic.scale_lr = false;
  c.batch = 6000;
  c.max_steps = 0;
  c.epochs = 2;
  c.checkpoint_every = 10;
  c.schedule.name = "constant";
  Trainer straight(c);
  straight.run();
  ASSERT_EQ(straight.global_step(), 20);
  c.out = tmp.path() + "/resumed";
  {
    Trainer first(c);
    first.run(10);
  }
  Trainer second(c);
  second.load_checkpoint(c.out);
  second.run();
  EXPECT_EQ(second.global_step(), 20);
  const std::vector<float> want = params_of(straight), got = params_of(second);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace braid::train
