// Issue 28, points 1-3: a failed job never exits 0 or says "converged"; the launcher blames
// the rank that stopped making progress; ranks that disagree on the config are refused at
// start; a resume continues the run it was given, in the directory it was given, at the
// run's global batch, and any strategy's run evaluates and resumes as one process.
//
// Real processes under `braid launch`. Parameter-server ranks run through `sh -c 'echo pid
// $$; exec braid train ...'` so the test learns their pids; a hang guard turns a hang into
// a failure.
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
#include "cli/same_checkpoint.h"
#include "fashion_mnist_data.h"
#include "launch/braid_process.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using braid::testing::HangGuard;
using braid::testing::has_text;
using braid::testing::last_line;
using braid::testing::let_it_compute;
using braid::testing::pid_of;
using braid::testing::Process;
using braid::testing::TempDir;

constexpr auto kHangLimit = std::chrono::seconds(120);

std::unique_ptr<Process> launch_ps(int workers, const std::string& train_args,
                                   const std::string& timeout_s) {
  const std::string script =
      "echo pid $$; exec " + std::string(BRAID_BINARY) + " train " + train_args;
  return std::make_unique<Process>(
      std::vector<std::string>{BRAID_BINARY, "launch", "--servers", "1", "--workers",
                               std::to_string(workers), "--", "sh", "-c", script},
      std::map<std::string, std::string>{{"BRAID_TIMEOUT_S", timeout_s}});
}

// The MLP on Fashion-MNIST: milliseconds a step, so a job is quick and a stop lands mid-run.
std::string mlp_ps_args(const TempDir& tmp, const std::string& mode, int steps) {
  return "--model mlp --strategy ps --ps.mode " + mode + " --batch 64 --max-steps " +
         std::to_string(steps) + " --eval-batches 2 --log-every 5 --threads 1 --overwrite --out " +
         tmp.file("out");
}

// Kills a stopped process unless disarmed: a failed assertion leaves nothing stopped behind.
struct StoppedProcess {
  pid_t pid = 0;
  ~StoppedProcess() {
    if (pid > 0) ::kill(pid, SIGKILL);
  }
};

// A sync worker that stops (SIGSTOP): the server names it as silent within half the job's
// deadline, the job fails, nothing says "converged", and the launcher's headline blames the
// stopped worker, not the server that gave up on it.
TEST(JobOutcome, StalledSyncWorkerFailsTheJobNamingIt) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2, mlp_ps_args(tmp, "sync", 100000), "12");
  HangGuard guard(job->pid(), kHangLimit);
  StoppedProcess stopped;
  const pid_t victim = pid_of(*job, "worker 1");
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/")) << job->output();
  let_it_compute(victim, 3);
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  stopped.pid = victim;
  const int code = job->finish();
  stopped.pid = 0;
  ASSERT_FALSE(guard.fired()) << "the job hung after worker 1 stopped:\n" << job->output();
  EXPECT_NE(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_FALSE(has_text(out, "judged converged")) << out;
  EXPECT_TRUE(has_text(out, "worker 1")) << out;
  const std::string last = last_line(out);
  EXPECT_TRUE(has_text(last, "braid launch: worker 1 stopped making progress")) << last;
  EXPECT_TRUE(has_text(last, "its process was stopped")) << last;
}

// Async: a stopped worker is dropped, the others finish, and the launcher does not wait on
// the stopped one after the servers are done: it stops it and names it. The chief finished
// and saved the run, so the job succeeded.
TEST(JobOutcome, StalledAsyncWorkerDoesNotHangTheJob) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2, mlp_ps_args(tmp, "async", 300), "12");
  HangGuard guard(job->pid(), kHangLimit);
  StoppedProcess stopped;
  const pid_t victim = pid_of(*job, "worker 1");
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/")) << job->output();
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  stopped.pid = victim;
  const int code = job->finish();
  stopped.pid = 0;
  ASSERT_FALSE(guard.fired()) << "the job hung on the stopped worker:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "[worker 0] done: 300 steps")) << job->output();
  EXPECT_TRUE(has_text(job->output(),
                       "every server has finished, and worker 1 (its process "
                       "was stopped: SIGSTOP or SIGTSTP) cannot make progress"))
      << job->output();
}

// A sync worker stopped alone by SIGTERM leaves the job at a step boundary; the others
// cannot step without it and stop there too, as an unfinished run (non-zero, checkpoint
// kept), never as a converged one.
TEST(JobOutcome, SyncJobThatLosesAWorkerEndsUnfinished) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2, mlp_ps_args(tmp, "sync", 100000), "60");
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = pid_of(*job, "worker 1");
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/")) << job->output();
  ASSERT_EQ(::kill(victim, SIGTERM), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_NE(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_FALSE(has_text(out, "judged converged")) << out;
  EXPECT_TRUE(has_text(out, "[worker 0] unfinished at step")) << out;
  EXPECT_TRUE(has_text(out, "worker 1 left the job after step")) << out;
  EXPECT_TRUE(has_text(last_line(out), "the job failed: its chief, worker 0, exited with code 1"))
      << out;
  EXPECT_TRUE(fs::exists(tmp.file("out/checkpoint/model.safetensors")));
}

// Every worker failing (each at start, here: more clients than samples) is a failed job.
TEST(JobOutcome, FedAvgJobWhoseWorkersAllFailExitsNonZero) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2,
                       "--model mlp --strategy fedavg --fedavg.clients 1000000 "
                       "--fedavg.rounds 2 --threads 1 --out " +
                           tmp.file("out"),
                       "30");
  HangGuard guard(job->pid(), kHangLimit);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_NE(code, 0) << job->output();
  const std::string& out = job->output();
  EXPECT_TRUE(has_text(out, "fedavg.clients is 1000000")) << out;
  EXPECT_TRUE(has_text(last_line(out), "braid launch: ")) << out;
  EXPECT_FALSE(has_text(out, "the job finished;")) << out;
}

// Both async workers killed: no worker finished, so the job failed.
TEST(JobOutcome, AsyncJobWithEveryWorkerKilledExitsNonZero) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2, mlp_ps_args(tmp, "async", 100000), "30");
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t w0 = pid_of(*job, "worker 0"), w1 = pid_of(*job, "worker 1");
  ASSERT_GT(w0, 0) << job->output();
  ASSERT_GT(w1, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[worker 0] epoch 1/")) << job->output();
  ASSERT_EQ(::kill(w1, SIGKILL), 0);
  ASSERT_EQ(::kill(w0, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_NE(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "no worker finished its run")) << job->output();
}

// A worker timeout shorter than one step is refused with the measured step, not a job in
// which the servers drop every worker and finish after 0 updates.
TEST(JobOutcome, WorkerTimeoutBelowAStepIsRefused) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = launch_ps(2, mlp_ps_args(tmp, "async", 50) + " --ps.worker-timeout-s 0.00001", "30");
  HangGuard guard(job->pid(), kHangLimit);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_NE(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "ps.worker_timeout_s is 1e-05 s, but one step computes for"))
      << job->output();
}

// Ranks started with different settings are refused at start, every differing key named
// with both values; per-rank keys (threads) may differ.
TEST(JobOutcome, RanksWithDifferentConfigsAreRefusedNamingEachKey) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string script =
      std::string(BRAID_BINARY) +
      " train --model mlp --max-steps 5 --threads $((BRAID_RANK + 1)) --seed $((BRAID_RANK + 7))"
      " --lr 0.0$((BRAID_RANK + 1)) --deterministic=$BRAID_RANK --out " +
      tmp.file("out");
  Process job({BRAID_BINARY, "launch", "-n", "2", "--", "sh", "-c", script},
              {{"BRAID_TIMEOUT_S", "60"}});
  HangGuard guard(job.pid(), kHangLimit);
  const auto started = std::chrono::steady_clock::now();
  const int code = job.finish();
  ASSERT_FALSE(guard.fired()) << job.output();
  EXPECT_NE(code, 0) << job.output();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  const std::string& out = job.output();
  EXPECT_TRUE(has_text(out, "started with different configs")) << out;
  EXPECT_TRUE(has_text(out, "seed (rank 0: 7, rank 1: 8)")) << out;
  EXPECT_TRUE(has_text(out, "optimizer.lr (rank 0: 0.01")) << out;
  EXPECT_TRUE(has_text(out, "deterministic (rank 0: false, rank 1: true)")) << out;
  EXPECT_FALSE(has_text(out, "threads (rank 0")) << out;
}

std::string mlp_run(const std::string& out, int steps) {
  return "--model mlp --batch 64 --max-steps " + std::to_string(steps) +
         " --schedule constant --eval-batches 2 --log-every 5 --threads 1 --deterministic --out " +
         out;
}

std::unique_ptr<Process> train(const std::string& args, int ranks = 1) {
  std::vector<std::string> argv;
  if (ranks > 1) argv = {BRAID_BINARY, "launch", "-n", std::to_string(ranks), "--"};
  argv.push_back(BRAID_BINARY);
  argv.push_back("train");
  // Shell-free word splitting: the arguments here have no quotes.
  size_t begin = 0;
  while (begin < args.size()) {
    size_t end = args.find(' ', begin);
    if (end == std::string::npos) end = args.size();
    if (end > begin) argv.push_back(args.substr(begin, end - begin));
    begin = end + 1;
  }
  return std::make_unique<Process>(argv);
}

// A copied run resumes into the copy: the original's checkpoint and metrics are untouched.
// A resume into another directory that holds a run is refused.
TEST(JobOutcome, ResumeWritesIntoTheRunItWasGiven) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto first = train(mlp_run(tmp.file("a"), 4));
  ASSERT_EQ(first->finish(), 0) << first->output();
  fs::copy(tmp.file("a"), tmp.file("b"), fs::copy_options::recursive);
  const auto original = fs::last_write_time(tmp.file("a/checkpoint/model.safetensors"));
  const auto metrics_size = fs::file_size(tmp.file("a/metrics.jsonl"));
  auto resumed = train("--resume " + tmp.file("b") + " --max-steps 8");
  ASSERT_EQ(resumed->finish(), 0) << resumed->output();
  EXPECT_EQ(fs::last_write_time(tmp.file("a/checkpoint/model.safetensors")), original);
  EXPECT_EQ(fs::file_size(tmp.file("a/metrics.jsonl")), metrics_size);
  std::ifstream state(tmp.file("b/checkpoint/state.json"));
  EXPECT_EQ(nlohmann::json::parse(state)["train_state"]["step"], 8);

  auto onto_a = train("--resume " + tmp.file("b") + " --max-steps 12 --out " + tmp.file("a"));
  EXPECT_NE(onto_a->finish(), 0) << onto_a->output();
  EXPECT_TRUE(has_text(onto_a->output(), "already holds a run")) << onto_a->output();
}

// A 2-rank run resumed as one process keeps its global batch (128, in two micro-batches of
// the run's 64), so a deterministic run continues with the bits of the uninterrupted 2-rank
// run, and the checkpoint it writes resumes again. A resume of a finished run says so.
TEST(JobOutcome, ResumeUnderAnotherWorldSizeKeepsTheGlobalBatch) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto whole = train(mlp_run(tmp.file("whole"), 12), 2);
  ASSERT_EQ(whole->finish(), 0) << whole->output();
  auto part = train(mlp_run(tmp.file("part"), 6), 2);
  ASSERT_EQ(part->finish(), 0) << part->output();
  auto alone = train("--resume " + tmp.file("part") + " --max-steps 9");
  ASSERT_EQ(alone->finish(), 0) << alone->output();
  EXPECT_TRUE(has_text(alone->output(), "keeps its global batch of 128")) << alone->output();
  auto again = train("--resume " + tmp.file("part") + " --max-steps 12", 2);
  ASSERT_EQ(again->finish(), 0) << again->output();
  EXPECT_TRUE(
      braid::testing::same_checkpoint(tmp.file("whole/checkpoint"), tmp.file("part/checkpoint")))
      << again->output();
  auto finished = train("--resume " + tmp.file("part"));
  ASSERT_EQ(finished->finish(), 0) << finished->output();
  EXPECT_TRUE(has_text(finished->output(), "already reached step 12 of 12")) << finished->output();
}

// A resume that sets another batch changes the global batch mid-epoch; every checkpoint it
// writes still resumes (the steps taken at the old batch are kept as train_state.step_offset).
TEST(JobOutcome, ResumeAtAnotherBatchWritesResumableCheckpoints) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto first = train(mlp_run(tmp.file("run"), 6), 2);
  ASSERT_EQ(first->finish(), 0) << first->output();
  auto smaller = train("--resume " + tmp.file("run") + " --batch 32 --max-steps 10");
  ASSERT_EQ(smaller->finish(), 0) << smaller->output();
  auto again = train("--resume " + tmp.file("run") + " --max-steps 12");
  ASSERT_EQ(again->finish(), 0) << again->output();
  std::ifstream state(tmp.file("run/checkpoint/state.json"));
  const nlohmann::json ts = nlohmann::json::parse(state)["train_state"];
  EXPECT_EQ(ts["step"], 12);
  // 6 steps of 128 samples, then 6 of 32: the loader stands at sample 6 x 128 + 6 x 32.
  EXPECT_EQ(ts["loader"]["samples"], 6 * 128 + 6 * 32) << ts.dump();
}

// ZeRO and pipeline runs evaluate with `braid eval` alone and resume as one process with no
// flag but --resume.
TEST(JobOutcome, ShardedAndPipelineRunsEvaluateAndResumeAsOneProcess) {
  REQUIRE_FASHION_MNIST();
  for (const std::string strategy : {"--zero-stage 1", "--strategy pipeline --pipeline.stages 2"}) {
    const TempDir tmp;
    auto run = train("--model mlp --batch 64 --max-steps 4 --eval-batches 2 --threads 1 " +
                         strategy + " --out " + tmp.file("run"),
                     2);
    ASSERT_EQ(run->finish(), 0) << strategy << ": " << run->output();
    Process eval({BRAID_BINARY, "eval", "--checkpoint", tmp.file("run")});
    ASSERT_EQ(eval.finish(), 0) << strategy << ": " << eval.output();
    EXPECT_TRUE(has_text(eval.output(), "accuracy")) << eval.output();
    auto resumed = train("--resume " + tmp.file("run") + " --max-steps 6");
    ASSERT_EQ(resumed->finish(), 0) << strategy << ": " << resumed->output();
  }
}

}  // namespace
