#include "train/stop_rules.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using nlohmann::json;

// Four significant digits: enough to see why a rule fired, short enough for one line.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

json optional_to_json(const std::optional<double>& v) { return v ? json(*v) : json(); }

// state[key] as a finite number or null, else an Error naming the file and the field.
std::optional<double> read_optional(const json& state, const char* key, const std::string& file) {
  const json& v = state.value(key, json());
  if (v.is_null()) return std::nullopt;
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    BRAID_THROW(Error, "checkpoint '", file, "': train_state.stop_rules.", key, " is ", v.dump(),
                "; it must be a finite number or null (the file was edited or is corrupt)");
  return v.get<double>();
}

int64_t read_count(const json& state, const char* key, const std::string& file) {
  const json& v = state.value(key, json(0));
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    BRAID_THROW(Error, "checkpoint '", file, "': train_state.stop_rules.", key, " is ", v.dump(),
                "; it must be an integer >= 0 (the file was edited or is corrupt)");
  return v.get<int64_t>();
}

}  // namespace

StopRules::StopRules(const TrainConfig::StopRules& config, Task task, LossTask loss)
    : config_(config) {
  const bool lm = task == Task::language_model;
  const bool regression = loss == LossTask::regression;
  const std::string& m = config.metric;
  BRAID_CHECK(m == "auto" || m == "accuracy" || m == "loss" || m == "mse" || m == "mae",
              "config: stop.metric is '", m, "'; accepted: auto, accuracy, loss, mse, mae");
  // auto: accuracy where the evaluation has one (classes, or labels of a multi-label loss).
  metric_ = m != "auto" ? m : lm || regression ? "loss" : "accuracy";
  BRAID_CHECK(!(lm && metric_ == "accuracy"),
              "config: stop.metric is accuracy, but a language model's evaluation measures only "
              "the loss; set stop.metric to loss (or auto)");
  BRAID_CHECK(!(regression && metric_ == "accuracy"),
              "config: stop.metric is accuracy, but a regression loss is evaluated by its loss, "
              "mse and mae; set stop.metric to one of those (or auto: the loss)");
  BRAID_CHECK(regression || (metric_ != "mse" && metric_ != "mae"), "config: stop.metric is ",
              metric_,
              ", which only a regression loss (mse, l1, huber) is evaluated by; set it "
              "to loss or accuracy (or auto)");
  BRAID_CHECK(std::isfinite(config.target) && config.target >= 0, "config: stop.target is ",
              config.target, "; it must be >= 0 (0: off)");
  BRAID_CHECK(!(metric_ == "accuracy" && config.target > 1), "config: stop.target is ",
              config.target,
              ", but stop.metric is accuracy, a fraction in [0, 1]; give a "
              "fraction (0.9 for 90 %), or set stop.metric to loss");
  BRAID_CHECK(config.patience >= 0, "config: stop.patience is ", config.patience,
              "; it must be >= 0 (0: off)");
  BRAID_CHECK(std::isfinite(config.min_rel_change) && config.min_rel_change >= 0,
              "config: stop.min_rel_change is ", config.min_rel_change,
              "; it must be >= 0 (0: off)");
}

bool StopRules::enabled() const {
  return config_.target > 0 || config_.patience > 0 || config_.min_rel_change > 0;
}

bool StopRules::improves(double value) const {
  if (!std::isfinite(value)) return false;
  if (!best_) return true;
  return metric_ == "accuracy" ? value > *best_ : value < *best_;
}

std::optional<StopDecision> StopRules::observe(const EvalResult& r, int64_t step) {
  const double value = metric_ == "accuracy" ? r.label_accuracy.value_or(r.accuracy)
                       : metric_ == "mse"    ? r.mse.value_or(NAN)
                       : metric_ == "mae"    ? r.mae.value_or(NAN)
                                             : r.loss;
  const bool higher_is_better = metric_ == "accuracy";
  // Tracked whether or not a rule is set, so a resume that turns one on has the history.
  if (improves(value)) {
    best_ = value;
    best_step_ = step;
    evals_without_improvement_ = 0;
  } else {
    ++evals_without_improvement_;
  }
  const std::optional<double> previous = previous_loss_;
  previous_loss_ = std::isfinite(r.loss) ? std::optional<double>(r.loss) : std::nullopt;

  const std::string at = " at step " + std::to_string(step);
  // NaN compares false everywhere below: a broken evaluation never stops a run.
  if (config_.target > 0 && (higher_is_better ? value >= config_.target : value <= config_.target))
    return StopDecision{"stop.target", "stop.target: " + metric_ + " " + num(value) +
                                           (higher_is_better ? " >= " : " <= ") +
                                           num(config_.target) + at};
  if (config_.patience > 0 && evals_without_improvement_ >= config_.patience)
    return StopDecision{
        "stop.patience",
        detail::concat("stop.patience: ", evals_without_improvement_, " evaluations without ",
                       higher_is_better ? "an accuracy above " : "a " + metric_ + " below ",
                       num(*best_), " (step ", best_step_, ")", at)};
  if (config_.min_rel_change > 0 && previous) {
    // A previous loss of 0 leaves only 0 -> 0 as no change.
    const double change = std::abs(r.loss - *previous);
    const double rel = *previous > 0 ? change / *previous : (change == 0 ? 0.0 : INFINITY);
    if (rel < config_.min_rel_change)
      return StopDecision{"stop.min_rel_change", "stop.min_rel_change: loss " + num(r.loss) +
                                                     " changed by " + num(rel) +
                                                     " of the previous " + num(*previous) + " (< " +
                                                     num(config_.min_rel_change) + ")" + at};
  }
  return std::nullopt;
}

json StopRules::state() const {
  return {{"metric", metric_},
          {"best", optional_to_json(best_)},
          {"best_step", best_step_},
          {"evals_without_improvement", evals_without_improvement_},
          {"previous_loss", optional_to_json(previous_loss_)}};
}

void StopRules::load(const json& state, const std::string& file) {
  if (state.is_null()) {
    best_.reset();
    best_step_ = evals_without_improvement_ = 0;
    previous_loss_.reset();
    return;
  }
  BRAID_CHECK(state.is_object(), "checkpoint '", file, "': train_state.stop_rules is ",
              state.dump().substr(0, 40),
              "; it must be an object (the file was edited or is corrupt)");
  const json& metric = state.value("metric", json());
  BRAID_CHECK(metric.is_string(), "checkpoint '", file, "': train_state.stop_rules.metric is ",
              metric.dump(), "; it must be \"accuracy\", \"loss\", \"mse\" or \"mae\"");
  // Everything is read before anything changes: a malformed state leaves this as it was.
  const std::optional<double> previous_loss = read_optional(state, "previous_loss", file);
  const std::optional<double> best = read_optional(state, "best", file);
  const int64_t best_step = read_count(state, "best_step", file);
  const int64_t since = read_count(state, "evals_without_improvement", file);
  const bool same_metric = metric.get<std::string>() == metric_;
  if (!same_metric && config_.patience > 0)
    log_warn("checkpoint '", file, "': its best was kept for stop.metric ",
             metric.get<std::string>(), ", this run watches ", metric_,
             ": stop.patience counts afresh from the next evaluation");
  previous_loss_ = previous_loss;
  best_ = same_metric ? best : std::nullopt;
  best_step_ = same_metric ? best_step : 0;
  evals_without_improvement_ = same_metric ? since : 0;
}

}  // namespace braid::train
