// Trainer::run's events (train/run_events.h) on short real runs: a recording observer sees
// them in the order things happen, and metrics.jsonl, written by the built-in observer, holds
// the records it always held, with the same keys and the events' values.
#include "train/run_events.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "temp_dir.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;
using nlohmann::json;

TrainConfig small_config(const std::string& out, int64_t steps) {
  TrainConfig c;
  c.model = json::parse(R"({"input": [28, 28, 1], "layers": [
      {"type": "flatten"}, {"type": "linear", "out_features": 16}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})");
  c.batch = 32;
  c.max_steps = steps;
  c.out = out;
  c.log_every = 5;
  c.eval_every = 4;
  c.checkpoint_every = 6;
  c.eval_batches = 2;
  c.optimizer.name = "sgd";
  c.optimizer.lr = 0.05;
  c.seed = 5;
  return c;
}

// Each event as "<kind> <step>", and the records themselves.
struct Recorder : RunObserver {
  std::vector<std::string> seen;
  std::vector<StepDone> steps;
  std::vector<Evaluated> evals;
  std::optional<RunStarted> started;
  std::optional<Stopped> stopped;

  void on_run_started(const RunStarted& e) override {
    started = e;
    seen.push_back("started");
  }
  void on_step_done(const StepDone& e) override {
    steps.push_back(e);
    seen.push_back("step " + std::to_string(e.step));
  }
  void on_evaluated(const Evaluated& e) override {
    evals.push_back(e);
    seen.push_back("eval " + std::to_string(e.step));
  }
  void on_converged(const Converged& e) override {
    seen.push_back("converged " + std::to_string(e.step));
  }
  void on_checkpointed(const Checkpointed& e) override {
    seen.push_back("checkpoint " + std::to_string(e.step));
  }
  void on_stopped(const Stopped& e) override {
    stopped = e;
    seen.push_back(std::string("stopped ") + stop_how_name(e.how) + " " + std::to_string(e.step));
  }
  void on_failed(const Failed& e) override { seen.push_back("failed " + std::to_string(e.step)); }
};

std::vector<json> records_of(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

std::set<std::string> keys_of(const json& record) {
  std::set<std::string> keys;
  for (const auto& [k, v] : record.items()) keys.insert(k);
  return keys;
}

TEST(RunEvents, AStepRunPublishesInOrderAndMetricsHoldTheSameRecords) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  Trainer t(small_config(tmp.file("out"), 12));
  auto rec = std::make_shared<Recorder>();
  t.add_observer(rec);
  const RunOutcome outcome = t.run();
  EXPECT_EQ(outcome.step, 12);

  // Logged every 5 steps and at the last; evaluated every 4; saved every 6, the last step
  // among them, so no extra final checkpoint.
  const std::vector<std::string> expected = {
      "started", "eval 4",  "step 5",  "checkpoint 6",  "eval 8",
      "step 10", "step 12", "eval 12", "checkpoint 12", "stopped done 12"};
  EXPECT_EQ(rec->seen, expected);
  ASSERT_TRUE(rec->started);
  EXPECT_EQ(rec->started->unit, "step");
  EXPECT_EQ(rec->started->total, 12);
  EXPECT_EQ(rec->started->strategy, "single");
  EXPECT_GT(rec->started->parameters, 0);
  ASSERT_TRUE(rec->stopped);
  EXPECT_EQ(rec->stopped->checkpoint_dir, tmp.file("out") + "/checkpoint");

  // metrics.jsonl: the records of these events, with today's keys and the events' values.
  const std::vector<json> records = records_of(tmp.file("out") + "/metrics.jsonl");
  const std::set<std::string> train_keys = {
      "event",           "step",         "epoch",   "loss", "lr", "samples/s", "step_ms",
      "comm_exposed_ms", "data_wait_ms", "seconds", "time"};
  const std::set<std::string> eval_keys = {"event",   "when",        "step",    "epoch",   "loss",
                                           "samples", "run_seconds", "seconds", "accuracy"};
  size_t steps = 0, evals = 0;
  for (const json& r : records) {
    if (r["event"] == "train") {
      ASSERT_LT(steps, rec->steps.size());
      const StepDone& s = rec->steps[steps++];
      EXPECT_EQ(keys_of(r), train_keys) << r.dump();
      EXPECT_EQ(r["step"], s.step);
      EXPECT_EQ(r["loss"].get<double>(), s.loss);
      EXPECT_EQ(r["lr"].get<double>(), s.lr);
    } else {
      ASSERT_EQ(r["event"], "eval") << r.dump();
      ASSERT_LT(evals, rec->evals.size());
      const Evaluated& e = rec->evals[evals++];
      EXPECT_EQ(keys_of(r), eval_keys) << r.dump();
      EXPECT_EQ(r["when"], "step");
      EXPECT_EQ(r["step"], e.step);
      EXPECT_EQ(r["loss"].get<double>(), e.loss);
      EXPECT_EQ(r["accuracy"].get<double>(), e.accuracy.value());
      EXPECT_EQ(r["samples"], e.samples);
    }
  }
  EXPECT_EQ(steps, 3u);
  EXPECT_EQ(evals, 3u);
}

// A stop rule that fires on the first evaluation: Converged, its "stop" record, and a run
// that ends there, converged, with the step saved; with eval_every 0 the evaluation is the
// epoch's (here the run's end inside it).
TEST(RunEvents, AConvergedRunEndsWithItsRuleAndTheStopRecord) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  TrainConfig c = small_config(tmp.file("out"), 7);
  c.eval_every = 0;
  c.checkpoint_every = 0;
  c.stop.metric = "loss";
  c.stop.target = 1e9;
  Trainer t(c);
  auto rec = std::make_shared<Recorder>();
  t.add_observer(rec);
  const RunOutcome outcome = t.run();
  EXPECT_EQ(outcome.stop_rule, "stop.target");
  const std::vector<std::string> expected = {"started",
                                             "step 5",
                                             "step 7",
                                             "eval 7",
                                             "converged 7",
                                             "checkpoint 7",
                                             "stopped converged 7"};
  EXPECT_EQ(rec->seen, expected);
  ASSERT_EQ(rec->evals.size(), 1u);
  EXPECT_EQ(rec->evals[0].when, "epoch");
  EXPECT_EQ(rec->stopped->rule, "stop.target");
  const std::vector<json> records = records_of(tmp.file("out") + "/metrics.jsonl");
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[2]["when"], "epoch");
  EXPECT_EQ(keys_of(records[3]), (std::set<std::string>{"event", "rule", "reason", "step"}));
  EXPECT_EQ(records[3]["event"], "stop");
  EXPECT_EQ(records[3]["rule"], "stop.target");
  EXPECT_EQ(records[3]["step"], 7);
}

// Another rank than 0 writes nothing, but a caller's observer there hears the run.
TEST(RunEvents, AnObserverOnARankThatWritesNothingStillHearsTheRun) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  Trainer t(small_config(tmp.file("out"), 5), /*load_data=*/true, /*rank=*/1);
  auto rec = std::make_shared<Recorder>();
  t.add_observer(rec);
  t.run();
  EXPECT_FALSE(std::filesystem::exists(tmp.file("out")));
  ASSERT_FALSE(rec->seen.empty());
  EXPECT_EQ(rec->seen.front(), "started");
  EXPECT_EQ(rec->seen.back(), "stopped done 5");
}

// A run that throws says so last: Failed, at the step it reached.
TEST(RunEvents, ARunThatThrowsEndsWithFailed) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  TrainConfig c = small_config(tmp.file("out"), 5);
  c.optimizer.lr = 1e30;  // diverges at once
  Trainer t(c);
  auto rec = std::make_shared<Recorder>();
  t.add_observer(rec);
  EXPECT_THROW(t.run(), Error);
  ASSERT_FALSE(rec->seen.empty());
  EXPECT_EQ(rec->seen.front(), "started");
  EXPECT_EQ(rec->seen.back().rfind("failed ", 0), 0u) << rec->seen.back();
}

}  // namespace
}  // namespace braid::train
