// Issue 17, membership and faults: parameter-server jobs under `braid launch --servers S
// --workers W`, as real processes. A worker killed with kill -9 in async mode (the servers
// log it and the job finishes, the chief saving the model); the same in sync mode (an
// error naming the worker, well within the deadline); a killed server (an error naming it
// on every worker).
//
// Each rank runs through `sh -c 'echo pid $$; exec braid train ...'`, so the test learns
// its pid from the "[worker i] pid N" lines. A hang guard turns a hang into a failure.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/fault_helpers.h"
#include "fashion_mnist_data.h"
#include "launch/braid_process.h"
#include "temp_dir.h"

namespace {

using braid::testing::HangGuard;
using braid::testing::has_text;
using braid::testing::let_it_compute;
using braid::testing::pid_of;
using braid::testing::Process;
using braid::testing::TempDir;

constexpr auto kHangLimit = std::chrono::seconds(90);

std::unique_ptr<Process> launch_ps(int servers, int workers, const std::string& train_args,
                                   const std::string& timeout_s) {
  const std::string script =
      "echo pid $$; exec " + std::string(BRAID_BINARY) + " train " + train_args;
  return std::make_unique<Process>(
      std::vector<std::string>{BRAID_BINARY, "launch", "--servers", std::to_string(servers),
                               "--workers", std::to_string(workers), "--", "sh", "-c", script},
      std::map<std::string, std::string>{{"BRAID_TIMEOUT_S", timeout_s}});
}

// The CNN at batch 64: tens of milliseconds a step, hundreds of steps, so a kill after a
// little compute lands mid-training.
std::string ps_args(const TempDir& tmp, const std::string& mode, int steps = 400) {
  return "--config " BRAID_SOURCE_DIR "/configs/cnn.json --strategy ps --ps.mode " + mode +
         " --batch 64 --max-steps " + std::to_string(steps) +
         " --eval-batches 4 --log-every 5 --threads 1 "
         "--overwrite --out " +
         tmp.file("out");
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(PsFaults, AsyncJobFinishesWithoutAKilledWorker) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(1, 3, ps_args(tmp, "async", 200), "60");
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = pid_of(*job, "worker 2");
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/")) << job->output();  // training is under way
  let_it_compute(victim, 5);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 2 died:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out, "braid launch: worker 2 was killed by signal 9 (SIGKILL)"));
  EXPECT_TRUE(has_text(out, "[ps 0] [braid W] ps server 0: lost worker 2"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 200 steps"));
  EXPECT_TRUE(std::filesystem::exists(tmp.file("out/checkpoint/model.safetensors")));
  const nlohmann::json stats = read_json(tmp.file("out/ps-server-0.json"));
  ASSERT_EQ(stats["lost_workers"].size(), 1u) << stats.dump();
  EXPECT_TRUE(has_text(stats["lost_workers"][0].get<std::string>(), "worker 2: "));
  // The two survivors' 400 steps each, and whatever the victim pushed before it died.
  EXPECT_GE(stats["updates"].get<int64_t>(), 400) << stats.dump();
  EXPECT_LT(stats["updates"].get<int64_t>(), 600) << stats.dump();
}

TEST(PsFaults, SyncJobNamesAKilledWorker) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  // A 60 s deadline: the server must name the dead worker long before it.
  auto job = launch_ps(1, 2, ps_args(tmp, "sync"), "60");
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = pid_of(*job, "worker 1");
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/")) << job->output();
  let_it_compute(victim, 5);
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 1 died:\n" << job->output();
  EXPECT_NE(code, 0) << job->output();
  // Named long before the communication deadline (60 s): not a timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(40));
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out, "braid launch: worker 1 was killed by signal 9 (SIGKILL)"));
  EXPECT_TRUE(has_text(out, "ps: worker 1 is gone and sync mode needs 2 gradients a step"));
  EXPECT_TRUE(has_text(braid::testing::last_line(out), "braid launch: ps 0 exited with code"));
}

TEST(PsFaults, KilledServerIsNamedOnEveryWorker) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2, 2, ps_args(tmp, "async"), "60");
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = pid_of(*job, "ps 1");
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/")) << job->output();
  let_it_compute(victim, 3);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after ps 1 died:\n" << job->output();
  EXPECT_EQ(code, 128 + SIGKILL) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(braid::testing::last_line(out),
                       "braid launch: ps 1 was killed by signal 9 (SIGKILL)"));
  for (const char* worker : {"[worker 0] ", "[worker 1] "})
    EXPECT_TRUE(has_text(out, std::string(worker) + "braid: I/O error: ps worker"))
        << worker << " did not name the failed server";
  EXPECT_TRUE(has_text(out, "a parameter server failed"));
  EXPECT_TRUE(has_text(out, "rank 3 (process " + std::to_string(victim) + ") died"));
}

// Federated averaging over three workers: one killed mid-run leaves its clients of that round
// out; the servers go on with the others' and the run ends with the model saved. Ten rounds,
// the kill landing in the third. The hang limit for the rest of the run comes from the pace
// of its start (launch, data, two rounds): a machine loaded enough to run slowly but steadily
// is not taken for a hang, and a run that stops making progress still is.
TEST(PsFaults, FedAvgJobFinishesWithoutAKilledWorker) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const auto launched = std::chrono::steady_clock::now();
  auto job = launch_ps(1, 3,
                       "--model mlp --strategy fedavg --fedavg.clients 60 "
                       "--fedavg.fraction 0.1 --fedavg.rounds 10 --batch 32 --optimizer sgd "
                       "--lr 0.05 --eval-every 5 --eval-batches 4 --log-every 1 --threads 1 "
                       "--overwrite --out " +
                           tmp.file("out"),
                       "60");
  pid_t victim = 0;
  {
    HangGuard guard(job->pid(), kHangLimit);
    victim = pid_of(*job, "worker 1");
    ASSERT_GT(victim, 0) << job->output();
    ASSERT_TRUE(job->wait_for("[worker 0] round 2/10")) << job->output();
    ASSERT_FALSE(guard.fired()) << "the job hung before its second round:\n" << job->output();
  }
  // Eight rounds remain, each at most half the start-up (which held two): 4x its time
  // covers them at the pace seen so far, and kHangLimit on top is the slack.
  const auto start_up =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - launched);
  HangGuard guard(job->pid(), kHangLimit + 4 * start_up);
  let_it_compute(victim, 5);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 1 died:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out, "[ps 0] [braid W] ps server 0: lost worker 1"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 10 rounds"));
  EXPECT_TRUE(std::filesystem::exists(tmp.file("out/checkpoint/model.safetensors")));
  EXPECT_EQ(read_json(tmp.file("out/ps-server-0.json"))["updates"].get<int64_t>(), 10);
}

// Each rank learns its role, its index in it and the job's shape; output is prefixed by role.
TEST(PsLaunch, RanksLearnTheirRoles) {
  const TempDir tmp;
  Process job({BRAID_BINARY, "launch", "--servers", "2", "--workers", "3", "--", "sh", "-c",
               "echo role $BRAID_ROLE $BRAID_ROLE_INDEX of $BRAID_NUM_WORKERS $BRAID_NUM_SERVERS "
               "rank $BRAID_RANK of $BRAID_WORLD_SIZE"});
  EXPECT_EQ(job.finish(), 0) << job.output();
  const std::string& out = job.output();
  for (int w = 0; w < 3; ++w)
    EXPECT_TRUE(has_text(out, "[worker " + std::to_string(w) + "] role worker " +
                                  std::to_string(w) + " of 3 2 rank " + std::to_string(w) +
                                  " of 5"));
  for (int s = 0; s < 2; ++s)
    EXPECT_TRUE(has_text(out, "[ps " + std::to_string(s) + "] role ps " + std::to_string(s) +
                                  " of 3 2 rank " + std::to_string(3 + s) + " of 5"));
}

TEST(PsLaunch, TheEvaluatorIsTheLastRank) {
  Process job({BRAID_BINARY, "launch", "--servers", "1", "--workers", "2", "--evaluator", "--",
               "sh", "-c",
               "echo role $BRAID_ROLE $BRAID_ROLE_INDEX of $BRAID_NUM_WORKERS $BRAID_NUM_SERVERS "
               "$BRAID_NUM_EVALUATORS rank $BRAID_RANK of $BRAID_WORLD_SIZE"});
  EXPECT_EQ(job.finish(), 0) << job.output();
  EXPECT_TRUE(has_text(job.output(), "[evaluator] role evaluator 0 of 2 1 1 rank 3 of 4"));
  EXPECT_TRUE(has_text(job.output(), "[ps 0] role ps 0 of 2 1 1 rank 2 of 4"));
  Process alone({BRAID_BINARY, "launch", "-n", "2", "--evaluator", "--", "true"});
  EXPECT_NE(alone.finish(), 0);
  EXPECT_TRUE(has_text(alone.output(), "an evaluator belongs to a parameter-server job"));
}

TEST(PsLaunch, ServersWithoutWorkersAndADisagreeingCountAreErrors) {
  Process half({BRAID_BINARY, "launch", "--servers", "1", "--", "true"});
  EXPECT_NE(half.finish(), 0);
  EXPECT_TRUE(has_text(half.output(), "needs both --servers S and --workers W"));
  Process wrong(
      {BRAID_BINARY, "launch", "-n", "4", "--servers", "1", "--workers", "2", "--", "true"});
  EXPECT_NE(wrong.finish(), 0);
  EXPECT_TRUE(has_text(wrong.output(), "-n 4 disagrees with --servers 1 --workers 2 (3 ranks)"));
}

// A strategy other than ps in a parameter-server job is an error naming both.
TEST(PsLaunch, DdpInAParameterServerJobIsAnError) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  Process job({BRAID_BINARY, "launch", "--servers", "1", "--workers", "1", "--", BRAID_BINARY,
               "train", "--model", "mlp", "--strategy", "ddp", "--max-steps", "2", "--out",
               tmp.file("out")});
  EXPECT_NE(job.finish(), 0);
  EXPECT_TRUE(has_text(job.output(),
                       "strategy 'ddp' runs in a job of equal ranks, but this is a "
                       "parameter-server job (1 workers, 1 servers)"));
}

}  // namespace
