// StopRules on hand-made evaluation sequences: each rule fires at the first evaluation
// that meets it and at none before, patience resets on an improvement, the loss counts
// lower as better, and the state carries a count across a checkpoint.
#include "train/stop_rules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using nlohmann::json;

TrainConfig::StopRules rules(double target, const char* metric, int64_t patience,
                             double min_rel_change) {
  TrainConfig::StopRules r;
  r.target = target;
  r.metric = metric;
  r.patience = patience;
  r.min_rel_change = min_rel_change;
  return r;
}

EvalResult accuracy(double a, double loss = 1.0) { return {loss, a, 100, {}, {}, {}}; }
EvalResult loss(double l) { return {l, 0.0, 100, {}, {}, {}}; }
// A regression evaluation: its loss (huber, say), MSE and MAE; no accuracy.
EvalResult regression(double l, double mse, double mae) { return {l, 0.0, 100, mse, mae, {}}; }

// Feeds `results` at steps 10, 20, ...; the index of the evaluation that fired (-1: none)
// and its decision. Observing stops at the first decision.
struct Fired {
  int index = -1;
  StopDecision decision;
};
Fired run(StopRules& r, const std::vector<EvalResult>& results) {
  for (size_t i = 0; i < results.size(); ++i)
    if (auto d = r.observe(results[i], 10 * static_cast<int64_t>(i + 1)))
      return {static_cast<int>(i), *d};
  return {};
}

std::string error_of(const TrainConfig::StopRules& config, Task task,
                     LossTask loss = LossTask::classification) {
  try {
    StopRules r(config, task, loss);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StopRules, TargetFiresOnTheFirstEvaluationThatReachesIt) {
  StopRules r(rules(0.9, "auto", 0, 0), Task::classification);
  EXPECT_EQ(r.metric(), "accuracy");
  const Fired f =
      run(r, {accuracy(0.5), accuracy(0.89999), accuracy(0.8), accuracy(0.9), accuracy(0.95)});
  EXPECT_EQ(f.index, 3);
  EXPECT_EQ(f.decision.rule, "stop.target");
  EXPECT_EQ(f.decision.reason, "stop.target: accuracy 0.9 >= 0.9 at step 40");
}

TEST(StopRules, LossTargetFiresAtOrBelowIt) {
  StopRules r(rules(0.5, "loss", 0, 0), Task::classification);
  const Fired f = run(r, {accuracy(0.99, 0.7), accuracy(0.99, 0.50001), accuracy(0.1, 0.5)});
  EXPECT_EQ(f.index, 2);
  EXPECT_EQ(f.decision.reason, "stop.target: loss 0.5 <= 0.5 at step 30");
}

// auto means the loss for a language model, whose accuracy is never measured (0).
TEST(StopRules, LanguageModelWatchesTheLossUnderAuto) {
  StopRules r(rules(2.0, "auto", 0, 0), Task::language_model);
  EXPECT_EQ(r.metric(), "loss");
  EXPECT_EQ(run(r, {loss(3.1), loss(2.2), loss(1.99)}).index, 2);
}

// Patience 3: the best, then two evaluations without it, an improvement that resets the
// count, and three more without one: the third of those fires.
// A regression loss: auto watches the loss; mse and mae watch theirs, lower is better; an
// accuracy is refused, and mse or mae for a classifier.
TEST(StopRules, RegressionWatchesItsLossMseOrMae) {
  StopRules a(rules(0.5, "auto", 0, 0), Task::classification, LossTask::regression);
  EXPECT_EQ(a.metric(), "loss");
  StopRules m(rules(10, "mse", 2, 0), Task::classification, LossTask::regression);
  Fired f = run(m, {regression(1, 30, 1), regression(0.1, 10.5, 9), regression(0.2, 9.5, 9)});
  EXPECT_EQ(f.index, 2);
  EXPECT_EQ(f.decision.reason, "stop.target: mse 9.5 <= 10 at step 30");
  StopRules mae(rules(0, "mae", 2, 0), Task::classification, LossTask::regression);
  f = run(mae, {regression(1, 1, 3), regression(0.5, 1, 2), regression(0.1, 1, 2.5),
                regression(0.1, 1, 2.1)});
  EXPECT_EQ(f.index, 3);
  EXPECT_EQ(f.decision.reason,
            "stop.patience: 2 evaluations without a mae below 2 (step 20) at step 40");
  EXPECT_NE(error_of(rules(0, "accuracy", 0, 0), Task::classification, LossTask::regression)
                .find("a regression loss is evaluated by its loss, mse and mae"),
            std::string::npos);
  EXPECT_NE(error_of(rules(0, "mse", 0, 0), Task::classification).find("only a regression loss"),
            std::string::npos);
  // Multi-label: auto is the per-label accuracy.
  StopRules b(rules(0.9, "auto", 0, 0), Task::classification, LossTask::multi_label);
  EXPECT_EQ(b.metric(), "accuracy");
  EvalResult labels = accuracy(0.0);
  labels.label_accuracy = 0.95;
  EXPECT_EQ(run(b, {labels}).index, 0);
}

TEST(StopRules, PatienceCountsEvaluationsWithoutImprovementAndResetsOnOne) {
  StopRules r(rules(0, "accuracy", 3, 0), Task::classification);
  const Fired f =
      run(r, {accuracy(0.5), accuracy(0.6), accuracy(0.6), accuracy(0.55), accuracy(0.61),
              accuracy(0.61), accuracy(0.3), accuracy(0.6), accuracy(0.9)});
  EXPECT_EQ(f.index, 7);
  EXPECT_EQ(f.decision.rule, "stop.patience");
  EXPECT_EQ(f.decision.reason,
            "stop.patience: 3 evaluations without an accuracy above 0.61 (step 50) at step 80");
}

// On the loss lower is better, and an equal loss is no improvement.
TEST(StopRules, PatienceOnTheLossCountsLowerAsBetter) {
  StopRules r(rules(0, "loss", 2, 0), Task::classification);
  const Fired f = run(r, {loss(1.0), loss(0.9), loss(0.95), loss(0.8), loss(0.8), loss(0.85)});
  EXPECT_EQ(f.index, 5);
  EXPECT_EQ(f.decision.reason,
            "stop.patience: 2 evaluations without a loss below 0.8 (step 40) at step 60");
}

TEST(StopRules, PatienceOfOneFiresOnTheFirstEvaluationThatDoesNotImprove) {
  StopRules r(rules(0, "auto", 1, 0), Task::classification);
  EXPECT_EQ(run(r, {accuracy(0.1), accuracy(0.2), accuracy(0.3), accuracy(0.3)}).index, 3);
}

// Consecutive losses, not the best: 0.9 -> 0.905 is 0.56 %, while the best (0.8) is 13 %
// away. The first evaluation has nothing to compare with.
TEST(StopRules, MinRelChangeComparesConsecutiveLosses) {
  StopRules r(rules(0, "auto", 0, 0.01), Task::classification);
  const Fired f = run(r, {accuracy(0.1, 1.0), accuracy(0.2, 0.8), accuracy(0.3, 0.9),
                          accuracy(0.4, 0.905), accuracy(0.5, 0.905)});
  EXPECT_EQ(f.index, 3);
  EXPECT_EQ(f.decision.rule, "stop.min_rel_change");
  EXPECT_EQ(f.decision.reason,
            "stop.min_rel_change: loss 0.905 changed by 0.005556 of the previous 0.9 (< 0.01) at "
            "step 40");
  // Exactly at the threshold is not below it.
  StopRules edge(rules(0, "auto", 0, 0.5), Task::classification);
  EXPECT_EQ(run(edge, {loss(2.0), loss(1.0), loss(0.5), loss(0.3)}).index, 3);
}

TEST(StopRules, WhenSeveralFireTheTargetIsReported) {
  StopRules r(rules(0.5, "accuracy", 1, 0.5), Task::classification);
  const Fired f = run(r, {accuracy(0.6, 1.0), accuracy(0.6, 1.0)});
  EXPECT_EQ(f.index, 0);
  EXPECT_EQ(f.decision.rule, "stop.target");
}

TEST(StopRules, NoRuleSetNeverFires) {
  StopRules r(rules(0, "auto", 0, 0), Task::classification);
  EXPECT_FALSE(r.enabled());
  std::vector<EvalResult> flat(50, accuracy(0.5, 0.5));
  EXPECT_EQ(run(r, flat).index, -1);
  EXPECT_TRUE(StopRules(rules(0, "auto", 0, 1e-3), Task::classification).enabled());
}

// A NaN loss (a broken evaluation) neither reaches a target, improves, nor counts as
// unchanged.
TEST(StopRules, NanNeverStopsARun) {
  StopRules target(rules(1.0, "loss", 0, 0), Task::classification);
  EXPECT_EQ(run(target, {loss(NAN), loss(NAN)}).index, -1);
  StopRules change(rules(0, "loss", 0, 0.5), Task::classification);
  EXPECT_EQ(run(change, {loss(1.0), loss(NAN), loss(NAN), loss(2.0)}).index, -1);
  StopRules patience(rules(0, "loss", 2, 0), Task::classification);
  EXPECT_EQ(run(patience, {loss(NAN), loss(1.0), loss(NAN), loss(NAN)}).index, 3);
}

// The state goes through JSON text as the checkpoint does; the restored rules continue the
// count (one more evaluation without improvement fires patience 3), where fresh ones would
// take that evaluation as their first best.
TEST(StopRules, StateRestoredFromACheckpointKeepsCounting) {
  const auto config = rules(0, "accuracy", 3, 0.001);
  StopRules before(config, Task::classification);
  EXPECT_EQ(run(before, {accuracy(0.7, 0.5), accuracy(0.6, 0.4), accuracy(0.6, 0.3)}).index, -1);
  const json saved = json::parse(before.state().dump());
  EXPECT_EQ(saved["evals_without_improvement"], 2);
  EXPECT_EQ(saved["best"], 0.7);
  EXPECT_EQ(saved["best_step"], 10);
  EXPECT_EQ(saved["previous_loss"], 0.3);

  StopRules resumed(config, Task::classification);
  resumed.load(saved, "ck/state.json");
  EXPECT_EQ(resumed.state(), before.state());
  const auto d = resumed.observe(accuracy(0.65, 0.2), 40);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->rule, "stop.patience");
  StopRules fresh(config, Task::classification);
  EXPECT_FALSE(fresh.observe(accuracy(0.65, 0.2), 40));

  // The previous loss came back too: 0.3 -> 0.3 is no change.
  StopRules change(rules(0, "accuracy", 0, 0.001), Task::classification);
  change.load(saved, "ck/state.json");
  EXPECT_TRUE(change.observe(accuracy(0.1, 0.3), 40));
}

// A checkpoint written before the rules existed has no state: the rules start afresh, even
// over what this object had seen.
TEST(StopRules, MissingStateStartsAfresh) {
  StopRules r(rules(0, "accuracy", 2, 0), Task::classification);
  run(r, {accuracy(0.9), accuracy(0.1)});
  r.load(json(), "ck/state.json");
  EXPECT_EQ(r.state(), StopRules(rules(0, "accuracy", 2, 0), Task::classification).state());
  EXPECT_EQ(run(r, {accuracy(0.2), accuracy(0.1), accuracy(0.1)}).index, 2);
}

// A best kept for the loss means nothing for the accuracy: it starts afresh, the previous
// loss stays.
TEST(StopRules, StateOfAnotherMetricKeepsOnlyThePreviousLoss) {
  StopRules by_loss(rules(0, "loss", 2, 0), Task::classification);
  run(by_loss, {loss(0.5), loss(0.6)});
  StopRules by_accuracy(rules(0, "accuracy", 2, 0), Task::classification);
  by_accuracy.load(json::parse(by_loss.state().dump()), "ck/state.json");
  const json s = by_accuracy.state();
  EXPECT_EQ(s["metric"], "accuracy");
  EXPECT_TRUE(s["best"].is_null());
  EXPECT_EQ(s["evals_without_improvement"], 0);
  EXPECT_EQ(s["previous_loss"], 0.6);
}

TEST(StopRules, MalformedStateIsAnErrorNamingTheFieldAndLeavesTheStateAsItWas) {
  StopRules r(rules(0, "accuracy", 2, 0), Task::classification);
  run(r, {accuracy(0.5)});
  const json before = r.state();
  for (const char* bad :
       {R"({"metric": "accuracy", "best": "high"})", R"({"metric": "accuracy", "best": 0.5,
            "evals_without_improvement": -1})",
        R"({"best": 0.5})", R"([1, 2])"}) {
    try {
      r.load(json::parse(bad), "ck/state.json");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("checkpoint 'ck/state.json': train_state.stop_rules"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(r.state(), before) << bad;
  }
}

TEST(StopRules, ConfigThatDoesNotFitTheTaskIsAnErrorNamingTheKey) {
  EXPECT_NE(error_of(rules(0, "accuracy", 3, 0), Task::language_model)
                .find("stop.metric is accuracy, but a language model"),
            std::string::npos);
  EXPECT_NE(error_of(rules(90, "auto", 0, 0), Task::classification)
                .find("stop.target is 90, but stop.metric is accuracy"),
            std::string::npos);
  EXPECT_NE(error_of(rules(0, "f1", 0, 0), Task::classification).find("stop.metric is 'f1'"),
            std::string::npos);
  EXPECT_NE(error_of(rules(0, "auto", -1, 0), Task::classification).find("stop.patience"),
            std::string::npos);
  EXPECT_NE(error_of(rules(-1, "loss", 0, 0), Task::classification).find("stop.target"),
            std::string::npos);
  // A loss target above 1 is fine, and so is any target for a language model's loss.
  EXPECT_EQ(error_of(rules(90, "loss", 0, 0), Task::classification), "");
  EXPECT_EQ(error_of(rules(3.5, "auto", 0, 0), Task::language_model), "");
}

}  // namespace
}  // namespace braid::train
