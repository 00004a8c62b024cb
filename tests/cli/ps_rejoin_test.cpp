// Issue 29, section 3: parameter-server jobs whose processes come back, as real processes
// under `braid launch --servers S --workers W --max-restarts K`, with real kill -9. A killed
// worker is restarted as a new process, rejoins at the servers' step and pushes again
// (async; sync with a backup worker, the run's steps complete; the chief, which keeps its
// duties); a killed server is restarted, reloads its range from the run's last checkpoint and
// the workers reconnect and finish with a model that trains; a worker killed with no restarts
// left is lost as in a job without restarts.
//
// Each rank runs through `sh -c 'echo pid $$; exec braid train ...'`, so the test learns the
// pid of every process of a slot (a restart prints its own line) and kills only its own
// children. The MLP with a 10 ms pause a step: a few seconds a job.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
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
using braid::testing::Process;
using braid::testing::TempDir;

constexpr auto kHangLimit = std::chrono::seconds(120);

std::unique_ptr<Process> launch_ps(int servers, int workers, int max_restarts,
                                   const std::string& train_args) {
  const std::string script =
      "echo pid $$; exec " + std::string(BRAID_BINARY) + " train " + train_args;
  return std::make_unique<Process>(
      std::vector<std::string>{BRAID_BINARY, "launch", "--servers", std::to_string(servers),
                               "--workers", std::to_string(workers), "--max-restarts",
                               std::to_string(max_restarts), "--", "sh", "-c", script},
      std::map<std::string, std::string>{{"BRAID_TIMEOUT_S", "60"}});
}

std::string ps_args(const TempDir& tmp, const std::string& mode, int steps,
                    const std::string& more = "") {
  return "--model mlp --strategy ps --ps.mode " + mode + " --batch 32 --max-steps " +
         std::to_string(steps) +
         " --slow-step-ms 10 --eval-batches 20 --log-every 20 --threads 1 " + more +
         " --overwrite --out " + tmp.file("out");
}

// The pid the `count`-th process of `who` ("worker 2", "ps 1") printed (2: its first
// restart), after waiting for its line; 0 if the output ended first.
pid_t nth_pid(Process& p, const std::string& who, int count = 1) {
  const std::string tag = "[" + who + "] pid ";
  if (!p.wait_for(tag, count)) return 0;
  const std::string& out = p.output();
  size_t at = std::string::npos;
  for (int i = 0; i < count; ++i) at = out.find(tag, at == std::string::npos ? 0 : at + 1);
  int pid = 0;
  if (std::sscanf(out.c_str() + at + tag.size(), "%d", &pid) != 1) return 0;
  return pid;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The last evaluation the chief recorded.
nlohmann::json last_eval(const std::string& metrics) {
  std::ifstream in(metrics);
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("event", "") == "eval") last = j;
  }
  return last;
}

// Kills the first process of `who` once worker 0 logged `step` and the victim computed a
// little more, so the kill lands mid-run.
void kill_mid_run(Process& job, const std::string& who, int step) {
  const pid_t victim = nth_pid(job, who);
  ASSERT_GT(victim, 0) << job.output();
  ASSERT_TRUE(job.wait_for("[worker 0] epoch 1/1  step " + std::to_string(step) + "/"))
      << job.output();
  let_it_compute(victim, 3);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
}

TEST(PsRejoin, AsyncKilledWorkerIsRestartedRejoinsAndPushesAgain) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  constexpr int kSteps = 200;
  auto job = launch_ps(1, 3, 2, ps_args(tmp, "async", kSteps));
  HangGuard guard(job->pid(), kHangLimit);
  kill_mid_run(*job, "worker 2", 40);
  ASSERT_GT(nth_pid(*job, "worker 2", 2), 0) << "worker 2 was not restarted:\n" << job->output();
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 2 died:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out,
                       "braid launch: worker 2 was killed by signal 9 (SIGKILL); restarting "
                       "it (restart 1 of 2)"));
  EXPECT_TRUE(has_text(out, "[ps 0] [braid W] ps server 0: worker 2 rejoined (restart 1) at step"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 200 steps"));
  EXPECT_TRUE(std::filesystem::exists(tmp.file("out/checkpoint/model.safetensors")));
  const nlohmann::json stats = read_json(tmp.file("out/ps-server-0.json"));
  ASSERT_EQ(stats["rejoined_workers"].size(), 1u) << stats.dump();
  const nlohmann::json& rejoin = stats["rejoined_workers"][0];
  EXPECT_EQ(rejoin["worker"], 2);
  // It pushed again after rejoining, and went on at its own step: async skips nothing and
  // repeats nothing, so every worker pushed its 200 steps, each applied once.
  EXPECT_GT(stats["worker_pushes"][2].get<int64_t>(), rejoin["pushes_before"].get<int64_t>())
      << stats.dump();
  EXPECT_EQ(rejoin["step"].get<int64_t>(), rejoin["pushes_before"].get<int64_t>()) << stats.dump();
  EXPECT_EQ(stats["worker_pushes"][2].get<int64_t>(), kSteps) << stats.dump();
  EXPECT_EQ(stats["updates"].get<int64_t>(), 3 * kSteps) << stats.dump();
}

TEST(PsRejoin, SyncKilledWorkerRejoinsWhileABackupWorkerCoversAndTheRunCompletes) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  constexpr int kSteps = 200;
  auto job = launch_ps(1, 3, 2, ps_args(tmp, "sync", kSteps, "--ps.backup-workers 1"));
  HangGuard guard(job->pid(), kHangLimit);
  kill_mid_run(*job, "worker 2", 40);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 2 died:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out, "[ps 0] [braid W] ps server 0: worker 2 rejoined (restart 1) at step"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 200 steps"));
  const nlohmann::json stats = read_json(tmp.file("out/ps-server-0.json"));
  // Every step of the run was applied, one update each.
  EXPECT_EQ(stats["updates"].get<int64_t>(), kSteps) << stats.dump();
  ASSERT_EQ(stats["rejoined_workers"].size(), 1u) << stats.dump();
  const nlohmann::json& rejoin = stats["rejoined_workers"][0];
  // It went on at the open step, past the one it died in, and contributed from there.
  EXPECT_GE(rejoin["step"].get<int64_t>(), rejoin["pushes_before"].get<int64_t>());
  EXPECT_GT(stats["worker_pushes"][2].get<int64_t>(), rejoin["pushes_before"].get<int64_t>())
      << stats.dump();
}

// The chief (worker 0) restarted keeps its duties: it saves the run's end and its last
// line is the chief's.
TEST(PsRejoin, KilledChiefIsRestartedAndSavesTheRun) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(1, 2, 1, ps_args(tmp, "async", 200, "--checkpoint-every 30"));
  HangGuard guard(job->pid(), kHangLimit);
  kill_mid_run(*job, "worker 0", 40);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after the chief died:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out,
                       "[worker 0] [braid W] ps worker 0: restarted (restart 1); rejoined "
                       "the job at step"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 200 steps"));
  EXPECT_EQ(read_json(tmp.file("out/checkpoint/state.json"))["train_state"]["step"], 200);
}

TEST(PsRejoin, KilledServerRestartsFromTheCheckpointAndTheWorkersGoOn) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job =
      launch_ps(2, 2, 1, ps_args(tmp, "async", 300, "--checkpoint-every 50 --eval-every 100"));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = nth_pid(*job, "ps 1");
  ASSERT_GT(victim, 0) << job->output();
  // Past the first checkpoint (step 50), which holds ps 1's range.
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/1  step 60/")) << job->output();
  ASSERT_TRUE(std::filesystem::exists(tmp.file("out/checkpoint/ps-server-1.safetensors")));
  let_it_compute(victim, 2);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after ps 1 died:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out,
                       "braid launch: ps 1 was killed by signal 9 (SIGKILL); restarting it "
                       "(restart 1 of 1)"));
  EXPECT_TRUE(has_text(out,
                       "[ps 1] [braid W] ps server 1: restarted (restart 1); reloaded its "
                       "range and optimizer state from " +
                           tmp.file("out/checkpoint") + ", saved at step "));
  for (const char* worker : {"[worker 0] ", "[worker 1] "})
    EXPECT_TRUE(has_text(out, std::string(worker) + "[braid W] ps worker " + worker[8] +
                                  ": reconnected to ps 1 (restart 1) at step"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 300 steps"));
  EXPECT_EQ(read_json(tmp.file("out/ps-server-1.json"))["restart"], 1);
  // The model is whole and trains: finite, and well above chance (10 classes).
  const nlohmann::json eval = last_eval(tmp.file("out/metrics.jsonl"));
  ASSERT_EQ(eval.value("step", 0), 300) << eval.dump();
  EXPECT_TRUE(std::isfinite(eval["loss"].get<double>())) << eval.dump();
  EXPECT_GT(eval["accuracy"].get<double>(), 0.5) << eval.dump();
}

// A server has nothing to restart from before the chief's first checkpoint: its new process
// says so, the workers stop waiting for it at once, and the job fails.
TEST(PsRejoin, AServerKilledBeforeTheFirstCheckpointCannotRestartAndTheJobFailsSaying) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const auto launched = std::chrono::steady_clock::now();
  auto job = launch_ps(1, 2, 1, ps_args(tmp, "async", 300));
  HangGuard guard(job->pid(), kHangLimit);
  kill_mid_run(*job, "ps 0", 40);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after ps 0 died:\n" << job->output();
  EXPECT_EQ(code, 1) << job->output();
  // Well within the communication deadline (60 s): nobody waited it out.
  EXPECT_LT(std::chrono::steady_clock::now() - launched, std::chrono::seconds(40));
  const std::string& out = job->output();
  EXPECT_TRUE(
      has_text(out, "ps server 0 was restarted (restart 1), but the run has no checkpoint"));
  for (const char* worker : {"[worker 0] ", "[worker 1] "})
    EXPECT_TRUE(has_text(out, std::string(worker) + "braid: I/O error: ps worker " + worker[8] +
                                  ": a parameter server failed: ps 0 (rank 2)"));
  EXPECT_TRUE(has_text(out, "the launcher does not restart it"));
  EXPECT_TRUE(has_text(braid::testing::last_line(out), "Last line ps 0 (restart 1) wrote"));
  EXPECT_TRUE(has_text(braid::testing::last_line(out),
                       "braid launch: ps 0 (restart 1) exited with "
                       "code 1"));
}

// Sync mode's steps went on without the range: a restarted server cannot rejoin, and says so.
TEST(PsRejoin, ASyncJobsKilledServerIsNotTakenBackAndSaysWhy) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(1, 2, 1, ps_args(tmp, "sync", 300, "--checkpoint-every 20"));
  HangGuard guard(job->pid(), kHangLimit);
  kill_mid_run(*job, "ps 0", 40);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after ps 0 died:\n" << job->output();
  EXPECT_EQ(code, 1) << job->output();
  EXPECT_TRUE(has_text(job->output(),
                       "ps server 0: restarted, but a sync job's server cannot "
                       "rejoin it"));
}

// Federated averaging: a worker killed mid-round comes back as a new process and takes part
// from the open round on, pulling the current model; the run's rounds all complete.
TEST(PsRejoin, FedAvgKilledClientProcessJoinsTheNextRound) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(1, 3, 1,
                       "--model mlp --strategy fedavg --fedavg.clients 60 --fedavg.fraction 0.1 "
                       "--fedavg.rounds 10 --batch 32 --optimizer sgd --lr 0.05 --eval-every 5 "
                       "--eval-batches 4 --log-every 1 --threads 1 --overwrite --out " +
                           tmp.file("out"));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = nth_pid(*job, "worker 1");
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] round 3/10")) << job->output();
  let_it_compute(victim, 3);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 1 died:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "ps server 0: worker 1 rejoined (restart 1) at step"));
  EXPECT_TRUE(has_text(job->output(), "[worker 0] done: 10 rounds"));
  const nlohmann::json stats = read_json(tmp.file("out/ps-server-0.json"));
  EXPECT_EQ(stats["updates"].get<int64_t>(), 10) << stats.dump();
  ASSERT_EQ(stats["rejoined_workers"].size(), 1u) << stats.dump();
  EXPECT_GT(stats["worker_pushes"][1].get<int64_t>(),
            stats["rejoined_workers"][0]["pushes_before"].get<int64_t>())
      << stats.dump();
}

// Over tcp: a restarted worker listens and the server connects to it; a restarted server
// listens and the workers connect to it.
TEST(PsRejoin, OverTcpAKilledWorkerRejoinsAndAKilledServerRestarts) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string script = "echo pid $$; exec " + std::string(BRAID_BINARY) + " train " +
                             ps_args(tmp, "async", 300, "--checkpoint-every 50");
  auto job = std::make_unique<Process>(
      std::vector<std::string>{BRAID_BINARY, "launch", "--servers", "2", "--workers", "3",
                               "--max-restarts", "2", "--transport", "tcp", "--", "sh", "-c",
                               script},
      std::map<std::string, std::string>{{"BRAID_TIMEOUT_S", "60"}});
  HangGuard guard(job->pid(), kHangLimit);
  kill_mid_run(*job, "worker 2", 40);
  ASSERT_TRUE(job->wait_for("ps server 1: worker 2 rejoined")) << job->output();
  const pid_t server = nth_pid(*job, "ps 1");
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/1  step 60/")) << job->output();
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out, "ps server 0: worker 2 rejoined (restart 1) at step"));
  EXPECT_TRUE(has_text(out, "ps server 1: restarted (restart 1); reloaded its range"));
  EXPECT_TRUE(has_text(out, "[worker 2] [braid W] ps worker 2: reconnected to ps 1 (restart 1)"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 300 steps"));
}

// A server that dies while a restarted worker is rejoining it: the worker waits for the
// server's restart like any other exchange, rejoins its new process and the job finishes
// (CI once saw the worker fail here instead). Server 1 is stopped before the worker is
// killed, so the worker's rejoin is surely waiting on it when it is killed.
TEST(PsRejoin, AServerKilledWhileAWorkerRejoinsItIsWaitedForAndRejoined) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2, 3, 2, ps_args(tmp, "async", 300, "--checkpoint-every 50"));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t server = nth_pid(*job, "ps 1");
  const pid_t worker = nth_pid(*job, "worker 2");
  ASSERT_GT(server, 0) << job->output();
  ASSERT_GT(worker, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/1  step 60/")) << job->output();
  ASSERT_EQ(::kill(server, SIGSTOP), 0);
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  ASSERT_TRUE(job->wait_for("ps server 0: worker 2 rejoined")) << job->output();
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out, "ps server 1: restarted (restart 1); reloaded its range"));
  EXPECT_TRUE(has_text(out, "[worker 2] [braid W] ps worker 2: reconnected to ps 1 (restart 1)"));
  EXPECT_TRUE(has_text(out, "ps server 1: worker 2 rejoined (restart 1) at step"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 300 steps"));
  EXPECT_FALSE(has_text(out, "lost on the way"));
}

// Restarts used up: the restarted worker killed again is lost as in a job without restarts
// (async goes on), and the servers are told not to wait for it.
TEST(PsRejoin, AWorkerKilledWithNoRestartsLeftIsLostAsBefore) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(1, 3, 1, ps_args(tmp, "async", 300));
  HangGuard guard(job->pid(), kHangLimit);
  kill_mid_run(*job, "worker 2", 40);
  const pid_t again = nth_pid(*job, "worker 2", 2);
  ASSERT_GT(again, 0) << job->output();
  ASSERT_TRUE(job->wait_for("ps server 0: worker 2 rejoined")) << job->output();
  let_it_compute(again, 3);
  ASSERT_EQ(::kill(again, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 2 died again:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out,
                       "braid launch: worker 2 (restart 1) was killed by signal 9 (SIGKILL); "
                       "the servers decide whether the job goes on without it"));
  EXPECT_TRUE(has_text(out,
                       "ps server 0: worker 2 is not restarted (the launcher has no "
                       "restarts left); going on without it"));
  EXPECT_TRUE(has_text(out, "braid launch: the job finished; 1 worker was lost on the way"));
  EXPECT_TRUE(has_text(out, "[worker 0] done: 300 steps"));
}

}  // namespace
