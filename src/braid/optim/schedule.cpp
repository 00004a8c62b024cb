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

float scaled_lr(float base_lr, int64_t batch, int64_t base_batch) {
  BRAID_CHECK(batch > 0 && base_batch > 0, "scaled_lr: batch = ", batch,
              " and base_batch = ", base_batch, " must be > 0");
  return static_cast<float>(static_cast<double>(base_lr) * static_cast<double>(batch) /
                            static_cast<double>(base_batch));
}

const std::vector<std::string_view>& schedule_names() {
  static const std::vector<std::string_view> names = {"constant", "step", "cosine"};
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
  } else {
    std::string names;
    for (std::string_view n : schedule_names()) (names += names.empty() ? "" : ", ") += n;
    BRAID_THROW(Error, "unknown learning-rate schedule '", c.name, "'; accepted: ", names);
  }
  BRAID_CHECK(c.warmup_steps >= 0, "schedule: warmup_steps = ", c.warmup_steps, " must be >= 0");
  if (c.warmup_steps > 0) s = std::make_unique<WarmupSchedule>(std::move(s), c.warmup_steps);
  return s;
}

}  // namespace braid::optim
