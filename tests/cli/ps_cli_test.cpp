// Issue 17: parameter-server runs through `braid launch --servers S --workers W -- braid
// train --strategy ps`, as real processes: a resumed sync run equals the uninterrupted one
// bit for bit (the servers' optimizer state and versions come back from the checkpoint), and
// the chief's convergence decision ends every worker cleanly with the model saved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "cli/fault_helpers.h"
#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"
#include "tiny_mlp.h"

namespace {

namespace fs = std::filesystem;
using braid::testing::BraidResult;
using braid::testing::has_text;
using braid::testing::run_braid;
using braid::testing::TempDir;

// A small MLP at a constant rate; each test names its optimizer (Adam: state the servers must
// carry across a restart).
std::string tiny_mlp(const TempDir& tmp) { return braid::testing::tiny_mlp_flags(tmp); }

// BRAID_LOG=info: the workers and servers other than rank 0 say their info lines too.
BraidResult launch_ps(int servers, int workers, const std::string& flags) {
  return run_braid("launch --servers " + std::to_string(servers) + " --workers " +
                       std::to_string(workers) + " -- " + BRAID_BINARY + " train " + flags,
                   "BRAID_TIMEOUT_S=30 BRAID_LOG=info");
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(PsCli, ResumedSyncRunEqualsTheUninterruptedOneBitwise) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string flags =
      tiny_mlp(tmp) + "--optimizer adam --lr 0.003 --strategy ps --ps.mode sync --eval-every 1000 ";
  const BraidResult whole = launch_ps(2, 2, flags + "--steps 40 --out " + tmp.file("whole"));
  ASSERT_EQ(whole.code, 0) << whole.output;
  const BraidResult first = launch_ps(2, 2, flags + "--steps 20 --out " + tmp.file("resumed"));
  ASSERT_EQ(first.code, 0) << first.output;
  const BraidResult rest = launch_ps(2, 2, "--resume " + tmp.file("resumed") + " --steps 40");
  ASSERT_EQ(rest.code, 0) << rest.output;
  for (const char* file :
       {"model.safetensors", "ps-server-0.safetensors", "ps-server-1.safetensors"}) {
    const std::string a = bytes_of(tmp.file("whole/checkpoint/") + file);
    ASSERT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == bytes_of(tmp.file("resumed/checkpoint/") + file)) << file << " differs";
  }
}

// A resumed job with fewer servers than it was saved with cannot find a shard's state.
TEST(PsCli, ResumingWithOtherServersIsAnErrorNamingTheShard) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string flags = tiny_mlp(tmp) + "--optimizer adam --strategy ps --eval-every 1000 ";
  ASSERT_EQ(launch_ps(1, 1, flags + "--steps 4 --out " + tmp.file("run")).code, 0);
  const BraidResult r = launch_ps(2, 1, "--resume " + tmp.file("run") + " --steps 8");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(has_text(r.output, "holds no state of ps server 1"));
}

// The chief's stop.target decision reaches the other workers through their pulls; each
// ends cleanly, and the chief's checkpoint loads into braid eval.
TEST(PsCli, ChiefsStopDecisionEndsEveryWorker) {
  REQUIRE_FASHION_MNIST();
  for (const char* mode : {"sync", "async"}) {
    const TempDir tmp;
    const std::string out = tmp.file("out");
    const BraidResult r = launch_ps(
        1, 2,
        tiny_mlp(tmp) + "--optimizer adam --lr 0.003 --strategy ps --ps.mode " + mode +
            // 5 ms a step: in async, worker 1 must not finish its steps before the
            // chief's decision at step 5 (unslowed, it raced it on a loaded machine).
            " --eval-every 5 --stop.target 0.5 --steps 4000 --slow-step-ms 5 --out " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(has_text(r.output, "[worker 0] converged (stop.target) at step"));
    EXPECT_TRUE(has_text(r.output, "[worker 1] [braid I] stopping at step "));
    EXPECT_TRUE(has_text(r.output, ": the run was judged converged"));
    EXPECT_TRUE(has_text(r.output, "[ps 0] [braid I] ps server 0: done after"));
    ASSERT_TRUE(fs::exists(out + "/checkpoint/model.safetensors")) << mode;
    const BraidResult eval = run_braid("eval --checkpoint " + out);
    EXPECT_EQ(eval.code, 0) << eval.output;
  }
}

// A short federated run: every process ends cleanly, the chief evaluates each round and
// saves a model braid eval loads, and the servers applied one update a round.
TEST(PsCli, FedAvgRunsItsRoundsAndSavesTheModel) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("out");
  const BraidResult r =
      launch_ps(2, 2,
                tiny_mlp(tmp) +
                    "--strategy fedavg --optimizer sgd --lr 0.05 --fedavg.clients 8 "
                    "--fedavg.fraction 0.5 --fedavg.split dirichlet --fedavg.alpha 0.5 "
                    "--fedavg.rounds 4 --fedavg.prox-mu 0.01 --fedavg.server-optimizer adam "
                    "--fedavg.server-lr 0.01 --eval-every 1 --out " +
                    out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "[worker 0] eval  round 4"));
  EXPECT_TRUE(has_text(r.output, "[worker 0] done: 4 rounds"));
  std::ifstream stats(out + "/ps-server-1.json");
  EXPECT_TRUE(has_text(std::string(std::istreambuf_iterator<char>(stats), {}), "\"updates\": 4"));
  const BraidResult eval = run_braid("eval --checkpoint " + out);
  EXPECT_EQ(eval.code, 0) << eval.output;
}

// A federated run resumed after two of its four rounds ends with the same bits as one that
// ran them all: rounds draw their clients by number, and the servers' FedAdam state comes
// back from the checkpoint.
TEST(PsCli, ResumedFedAvgRunEqualsTheUninterruptedOneBitwise) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string flags = tiny_mlp(tmp) +
                            "--strategy fedavg --optimizer sgd --lr 0.05 --fedavg.clients 8 "
                            "--fedavg.fraction 0.5 --fedavg.server-optimizer adam "
                            "--fedavg.server-lr 0.01 --eval-every 1000 ";
  ASSERT_EQ(launch_ps(1, 2, flags + "--fedavg.rounds 4 --out " + tmp.file("whole")).code, 0);
  ASSERT_EQ(launch_ps(1, 2, flags + "--fedavg.rounds 2 --out " + tmp.file("resumed")).code, 0);
  const BraidResult rest =
      launch_ps(1, 2, "--resume " + tmp.file("resumed") + " --fedavg.rounds 4");
  ASSERT_EQ(rest.code, 0) << rest.output;
  EXPECT_TRUE(has_text(rest.output, "[worker 0] done: 4 rounds"));
  for (const char* file : {"model.safetensors", "ps-server-0.safetensors"}) {
    const std::string a = bytes_of(tmp.file("whole/checkpoint/") + file);
    ASSERT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == bytes_of(tmp.file("resumed/checkpoint/") + file)) << file << " differs";
  }
}

// With an evaluator, it scores the servers' model off the workers' path and makes the stop
// decision; every worker stops, the chief saves, and the records are in evaluator.jsonl.
TEST(PsCli, EvaluatorDecidesTheStopForEveryWorker) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("out");
  const BraidResult r =
      run_braid("launch --servers 1 --workers 2 --evaluator -- " + std::string(BRAID_BINARY) +
                    " train " + tiny_mlp(tmp) +
                    "--optimizer adam --lr 0.003 --strategy ps --ps.mode async --eval-every 5 "
                    // Workers slowed to 5 ms a step: the evaluator starts (reads the data,
                    // builds the model) long before they could finish, and decides after ~10.
                    "--stop.target 0.5 --steps 4000 --slow-step-ms 5 --out " +
                    out,
                "BRAID_TIMEOUT_S=30 BRAID_LOG=info");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "[evaluator] stop.target: accuracy "));
  EXPECT_TRUE(has_text(r.output, "[worker 0] converged (announced) at step"));
  EXPECT_TRUE(has_text(r.output, "[worker 1] [braid I] stopping at step "));
  EXPECT_TRUE(has_text(r.output, "[evaluator] evaluator done after"));
  EXPECT_FALSE(has_text(r.output, "[worker 0] eval "))
      << "the chief evaluated beside the evaluator";
  std::ifstream records(out + "/evaluator.jsonl");
  const std::string text{std::istreambuf_iterator<char>(records), {}};
  EXPECT_TRUE(has_text(text, "\"event\":\"stop\""));
  ASSERT_TRUE(fs::exists(out + "/checkpoint/model.safetensors"));
}

// What a parameter-server job cannot run is refused by its servers as well as its workers,
// before they meet: a server that only waited for the workers would end in an I/O error
// of its own, and the job's last line would name that instead of the reason.
TEST(PsCli, ServersRefuseWhatTheStrategyCannotRunAsTheWorkersDo) {
  const TempDir tmp;
  const std::pair<std::string, std::string> cases[] = {
      {"--sync-batchnorm", "drop sync_batchnorm"},
      {"--clip-grad-norm 1", "drop clip_grad_norm under strategy ps"}};
  int run = 0;
  for (const auto& [flags, reason] : cases) {
    const BraidResult r = launch_ps(2, 2,
                                    "--model mlp --steps 1 --strategy ps " + flags + " --out " +
                                        tmp.file("run" + std::to_string(run++)));
    EXPECT_NE(r.code, 0) << r.output;
    // A server's own error line (either server: the launcher stops the other once one exits).
    size_t at = r.output.find("[ps 0] braid: error: ");
    if (at == std::string::npos) at = r.output.find("[ps 1] braid: error: ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_TRUE(has_text(line, reason)) << line;
  }
}

}  // namespace
