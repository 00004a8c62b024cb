// Convergence as a user meets it: `braid launch -n 2 -- braid train` with a stop rule ends
// every rank cleanly (exit 0) at the evaluation where the rule holds, leaves the stop
// record in metrics.jsonl and a checkpoint of that step that `braid eval` loads. Each test
// recomputes its rule from the run's own evaluation records, so a rule that fired too early,
// too late or never fails it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"
#include "tiny_mlp.h"

namespace {

namespace fs = std::filesystem;
using braid::testing::BraidResult;
using braid::testing::run_braid;
using braid::testing::TempDir;
using nlohmann::json;

constexpr int64_t kMaxSteps = 400;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  output: " << text << "\n  lacks:  " << part;
}

// The tiny MLP (tiny_mlp.h) with Adam.
std::string tiny_mlp(const TempDir& tmp) {
  return braid::testing::tiny_mlp_flags(tmp) + "--optimizer adam --lr 0.003 ";
}

// Evaluations every 5 steps, up to kMaxSteps.
std::string every_5() { return "--eval-every 5 --steps " + std::to_string(kMaxSteps) + " "; }

// `braid train FLAGS` on two ranks; a peer that hangs fails within BRAID_TIMEOUT_S.
// BRAID_LOG=info: rank 1 says its own decision too (by default only rank 0 says info).
BraidResult launch_train(const std::string& flags) {
  return run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train " + flags,
                   "BRAID_TIMEOUT_S=30 BRAID_LOG=info");
}

struct RunRecords {
  std::vector<json> evals;  // the "eval" records, in order
  json stop;                // the "stop" record, or null
};

RunRecords read_run(const std::string& out) {
  RunRecords run;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json rec = json::parse(line);
    if (rec["event"] == "eval") run.evals.push_back(rec);
    if (rec["event"] == "stop") {
      EXPECT_TRUE(run.stop.is_null()) << "a second stop record: " << line;
      run.stop = rec;
    }
  }
  return run;
}

// What every converged run shows, whatever the rule: both ranks took the decision, the run
// stopped early with exit 0 at the last evaluation, its checkpoint is of that step and
// loads into `braid eval`.
void expect_converged(const BraidResult& r, const std::string& out, const std::string& rule,
                      const RunRecords& run) {
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_FALSE(run.stop.is_null()) << "no stop record; output:\n" << r.output;
  ASSERT_FALSE(run.evals.empty());
  const int64_t step = run.stop["step"];
  EXPECT_EQ(run.stop["rule"], rule);
  EXPECT_EQ(run.evals.back()["step"], step) << "the stop came after another evaluation";
  EXPECT_LT(step, kMaxSteps);
  const std::string reason = run.stop["reason"];
  EXPECT_TRUE(contains(r.output, "[rank 0] " + reason));
  EXPECT_TRUE(contains(r.output, "[rank 1] [braid I] " + reason));
  EXPECT_TRUE(contains(r.output, "[rank 0] converged (" + rule + ") at step " +
                                     std::to_string(step) + "/" + std::to_string(kMaxSteps)));

  std::ifstream state_file(out + "/checkpoint/state.json");
  const json state = json::parse(state_file);
  EXPECT_EQ(state["train_state"]["step"], step);
  EXPECT_TRUE(state["train_state"].contains("stop_rules"));
  ASSERT_TRUE(fs::exists(out + "/checkpoint/model.safetensors"));
  const BraidResult eval = run_braid("eval --checkpoint " + out);
  EXPECT_EQ(eval.code, 0) << eval.output;
  EXPECT_TRUE(contains(eval.output, "test loss"));
}

TEST(StopRulesCli, TargetAccuracyStopsEveryRankAtTheFirstEvaluationReachingIt) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("out");
  const BraidResult r = launch_train(tiny_mlp(tmp) + every_5() + " --stop.target 0.7 --out " + out);
  const RunRecords run = read_run(out);
  ASSERT_NO_FATAL_FAILURE(expect_converged(r, out, "stop.target", run));
  for (size_t i = 0; i + 1 < run.evals.size(); ++i)
    EXPECT_LT(run.evals[i]["accuracy"].get<double>(), 0.7) << run.evals[i];
  EXPECT_GE(run.evals.back()["accuracy"].get<double>(), 0.7);
}

// Patience 3 on the accuracy, recomputed; then the same run stopped one evaluation short
// and resumed stops at the same step (the count came back with the checkpoint), while the
// checkpoint with its stop state removed (as written before the rules existed) resumes
// too, counting afresh.
TEST(StopRulesCli, PatienceStopsAfterThreeEvaluationsWithoutImprovementAndResumesCounting) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string flags = tiny_mlp(tmp) + "--eval-every 5 --stop.patience 3 ";
  const std::string out = tmp.file("out");
  BraidResult r = launch_train(flags + "--steps " + std::to_string(kMaxSteps) + " --out " + out);
  const RunRecords run = read_run(out);
  ASSERT_NO_FATAL_FAILURE(expect_converged(r, out, "stop.patience", run));
  double best = -1;
  int since = 0;
  for (size_t i = 0; i < run.evals.size(); ++i) {
    const double a = run.evals[i]["accuracy"];
    since = a > best ? 0 : since + 1;
    best = std::max(best, a);
    EXPECT_EQ(since >= 3, i + 1 == run.evals.size()) << run.evals[i];
  }

  const int64_t stop_step = run.stop["step"];
  ASSERT_GE(stop_step, 20);  // the first evaluation sets the best: 3 more at the earliest
  const std::string part = tmp.file("part");
  r = launch_train(flags + "--steps " + std::to_string(stop_step - 5) + " --out " + part);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(read_run(part).stop.is_null());
  fs::copy(part + "/checkpoint", tmp.file("old"), fs::copy_options::recursive);
  r = launch_train("--resume " + part + " --steps " + std::to_string(kMaxSteps));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_run(part).stop, run.stop);

  json state = json::parse(std::ifstream(tmp.file("old/state.json")));
  ASSERT_EQ(state["train_state"].erase("stop_rules"), 1u);
  std::ofstream(tmp.file("old/state.json")) << state.dump();
  r = launch_train("--resume " + tmp.file("old") + " --steps " + std::to_string(kMaxSteps) +
                   " --out " + tmp.file("fresh"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json fresh_stop = read_run(tmp.file("fresh")).stop;
  if (!fresh_stop.is_null()) {
    EXPECT_GE(fresh_stop["step"].get<int64_t>(), stop_step + 15);
  }
}

// Under local SGD (averaging every 4 steps; the trainer synchronizes before evaluating),
// the relative change of consecutive evaluation losses, recomputed.
TEST(StopRulesCli, MinRelChangeStopsLocalSgdWhenTheLossSettles) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("out");
  const BraidResult r = launch_train(tiny_mlp(tmp) + every_5() +
                                     " --strategy local_sgd --local-sgd.period 4 "
                                     "--stop.min-rel-change 0.01 --out " +
                                     out);
  const RunRecords run = read_run(out);
  ASSERT_NO_FATAL_FAILURE(expect_converged(r, out, "stop.min_rel_change", run));
  EXPECT_TRUE(contains(r.output, "strategy local_sgd"));
  for (size_t i = 1; i < run.evals.size(); ++i) {
    const double now = run.evals[i]["loss"], before = run.evals[i - 1]["loss"];
    EXPECT_EQ(std::abs(now - before) / before < 0.01, i + 1 == run.evals.size()) << run.evals[i];
  }
}

// One process, evaluating at each epoch's end (eval_every 0): the target reached after
// the first epoch ends the run there instead of starting the second.
TEST(StopRulesCli, TargetAtAnEpochsEndEndsTheRunBeforeTheNextEpoch) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.file("out");
  const BraidResult r = run_braid("train " + tiny_mlp(tmp) +
                                  "--eval-every 0 --epochs 3 --stop.target 0.5 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const RunRecords run = read_run(out);
  ASSERT_EQ(run.evals.size(), 1u) << r.output;
  EXPECT_EQ(run.evals[0]["when"], "epoch");
  ASSERT_FALSE(run.stop.is_null());
  EXPECT_EQ(run.stop["rule"], "stop.target");
  EXPECT_EQ(run.stop["step"], run.evals[0]["step"]);
  EXPECT_TRUE(contains(r.output, "converged (stop.target) at step "));
  const json state = json::parse(std::ifstream(out + "/checkpoint/state.json"));
  EXPECT_EQ(state["train_state"]["step"], run.stop["step"]);
  EXPECT_EQ(state["train_state"]["epoch"], 1);
}

// Rules that cannot apply are refused before training, naming the key.
TEST(StopRulesCli, AccuracyTargetAboveOneIsRefusedNamingTheKey) {
  const TempDir tmp;
  const BraidResult r =
      run_braid("train --model mlp --stop.target 90 --steps 1 --out " + tmp.file("out"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "stop.target is 90, but stop.metric is accuracy"));
  EXPECT_FALSE(fs::exists(tmp.file("out") + "/metrics.jsonl"));
}

}  // namespace
