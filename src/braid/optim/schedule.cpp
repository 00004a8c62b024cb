#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace braid::optim {
namespace {

void check_lr(std::string_view what, std::string_view key, float value) {
  BRAID_CHECK(std::isfinite(value) && value >= 0, what, " schedule: ", key, " = ", value,
              " must be finite and >= 0");
}

void check_step(std::string_view what, int64_t step) {
  BRAID_CHECK(step >= 0, what, " schedule: lr(", step, ") asked for a negative step");
}

}  // namespace

Schedule::~Schedule() = default;

ConstantSchedule::ConstantSchedule(float base_lr) : base_(base_lr) {
  check_lr("constant", "lr", base_lr);
}

float ConstantSchedule::lr(int64_t step) const {
  check_step("constant", step);
  return base_;
}

StepSchedule::StepSchedule(float base_lr, int64_t step_size, float gamma)
    : base_(base_lr), step_size_(step_size), gamma_(gamma) {
  check_lr("step", "lr", base_lr);
  BRAID_CHECK(step_size > 0, "step schedule: step_size = ", step_size, " must be > 0");
  BRAID_CHECK(std::isfinite(gamma) && gamma > 0, "step schedule: gamma = ", gamma,
              " must be finite and > 0");
}

float StepSchedule::lr(int64_t step) const {
  check_step("step", step);
  return static_cast<float>(
      base_ * std::pow(static_cast<double>(gamma_), static_cast<double>(step / step_size_)));
}

CosineSchedule::CosineSchedule(float base_lr, int64_t total_steps, float min_lr)
    : base_(base_lr), total_(total_steps), min_(min_lr) {
  check_lr("cosine", "lr", base_lr);
  check_lr("cosine", "min_lr", min_lr);
  BRAID_CHECK(total_steps > 0, "cosine schedule: total_steps = ", total_steps, " must be > 0");
}

float CosineSchedule::lr(int64_t step) const {
  check_step("cosine", step);
  const double t = static_cast<double>(std::min(step, total_)) / static_cast<double>(total_);
  const double base = base_, min = min_;
  return static_cast<float>(min + (base - min) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0);
}

WarmupSchedule::WarmupSchedule(std::unique_ptr<Schedule> inner, int64_t warmup_steps)
    : inner_(std::move(inner)), warmup_(warmup_steps) {
  BRAID_CHECK(inner_ != nullptr, "warm-up schedule: no schedule to wrap");
  BRAID_CHECK(warmup_steps > 0, "warm-up schedule: warmup_steps = ", warmup_steps, " must be > 0");
}

float WarmupSchedule::lr(int64_t step) const {
  check_step("warm-up", step);
  const float inner = inner_->lr(step);
  if (step >= warmup_) return inner;
  return static_cast<float>(static_cast<double>(inner) * static_cast<double>(step + 1) /
                            static_cast<double>(warmup_));
}

LinearSchedule::LinearSchedule(float base_lr, int64_t start_step, int64_t end_step, float final_lr)
    : base_(base_lr), start_(start_step), end_(end_step), final_(final_lr) {
  check_lr("linear", "lr", base_lr);
  check_lr("linear", "final lr", final_lr);
  BRAID_CHECK(start_step >= 0 && end_step > start_step, "linear schedule: total_steps = ", end_step,
              " must be > the warm-up's ", start_step, " steps");
}

float LinearSchedule::lr(int64_t step) const {
  check_step("linear", step);
  if (step <= start_) return base_;
  if (step >= end_) return final_;
  const double base = base_, fin = final_;
  return static_cast<float>(fin + (base - fin) * static_cast<double>(end_ - step) /
                                      static_cast<double>(end_ - start_));
}

FloorCosineSchedule::FloorCosineSchedule(float base_lr, int64_t start_step, int64_t end_step,
                                         double min_ratio)
    : base_(base_lr), start_(start_step), end_(end_step), min_ratio_(min_ratio) {
  check_lr("warmup_cosine", "lr", base_lr);
  BRAID_CHECK(std::isfinite(min_ratio) && min_ratio >= 0 && min_ratio <= 1,
              "warmup_cosine schedule: min_ratio = ", min_ratio, " must be in [0, 1]");
  BRAID_CHECK(start_step >= 0 && end_step > start_step,
              "warmup_cosine schedule: total_steps = ", end_step, " must be > the warm-up's ",
              start_step, " steps");
}

float FloorCosineSchedule::lr(int64_t step) const {
  check_step("warmup_cosine", step);
  if (step < start_) return base_;
  const double p = static_cast<double>(std::min(step - start_ + 1, end_ - start_)) /
                   static_cast<double>(end_ - start_);
  const double ratio = min_ratio_ + (1.0 - min_ratio_) * (1.0 + std::cos(std::numbers::pi * p)) / 2;
  return static_cast<float>(static_cast<double>(base_) * ratio);
}

RampWarmupSchedule::RampWarmupSchedule(std::unique_ptr<Schedule> inner, float base_lr,
                                       int64_t warmup_steps, Ramp ramp, double start_ratio)
    : inner_(std::move(inner)),
      start_(start_ratio * static_cast<double>(base_lr)),
      warmup_(warmup_steps),
      ramp_(ramp) {
  BRAID_CHECK(inner_ != nullptr, "warm-up schedule: no schedule to wrap");
  check_lr("warm-up", "lr", base_lr);
  BRAID_CHECK(std::isfinite(start_ratio) && start_ratio >= 0 && start_ratio <= 1,
              "warm-up schedule: warmup_start_ratio = ", start_ratio, " must be in [0, 1]");
  BRAID_CHECK(warmup_steps >= (ramp == Ramp::log ? 2 : 1),
              "warm-up schedule: warmup_steps = ", warmup_steps,
              " must be >= ", ramp == Ramp::log ? "2 for a log ramp" : "1");
}

float RampWarmupSchedule::lr(int64_t step) const {
  check_step("warm-up", step);
  const float inner = inner_->lr(step);
  if (step >= warmup_) return inner;
  const double g = ramp_ == Ramp::linear ? static_cast<double>(step) / static_cast<double>(warmup_)
                                         : 1.0 / std::log(static_cast<double>(warmup_)) *
                                               std::log(static_cast<double>(step + 1));
  return static_cast<float>(start_ + (static_cast<double>(inner) - start_) * g);
}

LagSchedule::LagSchedule(std::unique_ptr<Schedule> inner, int64_t lag_steps)
    : inner_(std::move(inner)), lag_(lag_steps) {
  BRAID_CHECK(inner_ != nullptr, "lagged schedule: no schedule to wrap");
  BRAID_CHECK(lag_steps >= 0, "lagged schedule: lag_steps = ", lag_steps, " must be >= 0");
}

float LagSchedule::lr(int64_t step) const {
  check_step("lagged", step);
  return inner_->lr(std::max<int64_t>(step - lag_, 0));
}

float scaled_lr(float base_lr, int64_t batch, int64_t base_batch) {
  BRAID_CHECK(batch > 0 && base_batch > 0, "scaled_lr: batch = ", batch,
              " and base_batch = ", base_batch, " must be > 0");
  return static_cast<float>(static_cast<double>(base_lr) * static_cast<double>(batch) /
                            static_cast<double>(base_batch));
}

const std::vector<std::string_view>& schedule_names() {
  static const std::vector<std::string_view> names = {"constant", "step", "cosine", "linear",
                                                      "warmup_cosine"};
  return names;
}

std::unique_ptr<Schedule> make_schedule(const ScheduleConfig& c, float base_lr) {
  std::unique_ptr<Schedule> s;
  if (c.name == "constant") {
    s = std::make_unique<ConstantSchedule>(base_lr);
  } else if (c.name == "step") {
    s = std::make_unique<StepSchedule>(base_lr, c.step_size, c.gamma);
  } else if (c.name == "cosine") {
    s = std::make_unique<CosineSchedule>(base_lr, c.total_steps, c.min_lr);
  } else if (c.name == "linear") {
    s = std::make_unique<LinearSchedule>(base_lr, std::max<int64_t>(c.warmup_steps, 0),
                                         c.total_steps, c.min_lr);
  } else if (c.name == "warmup_cosine") {
    s = std::make_unique<FloorCosineSchedule>(base_lr, std::max<int64_t>(c.warmup_steps, 0),
                                              c.total_steps, c.min_ratio);
  } else {
    std::string names;
    for (std::string_view n : schedule_names()) (names += names.empty() ? "" : ", ") += n;
    BRAID_THROW(Error, "unknown learning-rate schedule '", c.name, "'; accepted: ", names);
  }
  BRAID_CHECK(c.warmup_steps >= 0, "schedule: warmup_steps = ", c.warmup_steps, " must be >= 0");
  BRAID_CHECK(c.warmup_type == "factor" || c.warmup_type == "linear" || c.warmup_type == "log",
              "schedule: warmup_type '", c.warmup_type, "' is not one of factor, linear, log");
  if (c.warmup_steps > 0 && c.warmup_type == "factor")
    s = std::make_unique<WarmupSchedule>(std::move(s), c.warmup_steps);
  else if (c.warmup_steps > 0)
    s = std::make_unique<RampWarmupSchedule>(std::move(s), base_lr, c.warmup_steps,
                                             c.warmup_type == "log" ? Ramp::log : Ramp::linear,
                                             c.warmup_start_ratio);
  BRAID_CHECK(c.lag_steps >= 0, "schedule: lag_steps = ", c.lag_steps, " must be >= 0");
  if (c.lag_steps > 0) s = std::make_unique<LagSchedule>(std::move(s), c.lag_steps);
  return s;
}

}  // namespace braid::optim
