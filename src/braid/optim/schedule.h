// Learning-rate schedules: lr(step) for 0-based step numbers (the lr for the step about to
// run, i.e. for Optimizer::steps()). Values are computed in double and returned as float.
// Schedules are immutable after construction, so lr() is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace braid::optim {

class Schedule {
 public:
  virtual ~Schedule();
  virtual float lr(int64_t step) const = 0;  // step >= 0
};

// lr = base.
class ConstantSchedule final : public Schedule {
 public:
  explicit ConstantSchedule(float base_lr);
  float lr(int64_t step) const override;

 private:
  float base_;
};

// lr = base * gamma^floor(step / step_size), as torch.optim.lr_scheduler.StepLR.
class StepSchedule final : public Schedule {
 public:
  StepSchedule(float base_lr, int64_t step_size, float gamma);
  float lr(int64_t step) const override;

 private:
  float base_;
  int64_t step_size_;
  float gamma_;
};

// lr = min + (base - min) * (1 + cos(pi * step / total)) / 2 for step <= total, as
// torch.optim.lr_scheduler.CosineAnnealingLR (T_max = total, eta_min = min); min after total
// (where PyTorch's closed form would rise again).
class CosineSchedule final : public Schedule {
 public:
  CosineSchedule(float base_lr, int64_t total_steps, float min_lr = 0);
  float lr(int64_t step) const override;

 private:
  float base_;
  int64_t total_;
  float min_;
};

// Linear warm-up over another schedule (Goyal et al. 2017, "Accurate, Large Minibatch SGD"):
// lr = inner.lr(step) * (step + 1) / warmup for step < warmup, inner.lr(step) after. The
// factor multiplies the inner schedule at the same step (as PyTorch's ChainedScheduler of
// LinearLR(start_factor = 1/warmup) and the inner one), so the inner schedule's milestones
// and total_steps count from step 0 of the run.
class WarmupSchedule final : public Schedule {
 public:
  WarmupSchedule(std::unique_ptr<Schedule> inner, int64_t warmup_steps);
  float lr(int64_t step) const override;

 private:
  std::unique_ptr<Schedule> inner_;
  int64_t warmup_;
};

// The linear scaling rule (Goyal et al. 2017): base_lr * batch / base_batch.
float scaled_lr(float base_lr, int64_t batch, int64_t base_batch);

struct ScheduleConfig {
  std::string name = "constant";  // constant, step, cosine
  int64_t warmup_steps = 0;       // > 0 wraps the schedule in a linear warm-up
  int64_t total_steps = 0;        // cosine
  int64_t step_size = 0;          // step
  float gamma = 0.1f;             // step
  float min_lr = 0;               // cosine
};

const std::vector<std::string_view>& schedule_names();

// Builds config.name starting from base_lr. An unknown name or a bad value is a braid::Error
// naming it (and listing the accepted names).
std::unique_ptr<Schedule> make_schedule(const ScheduleConfig& config, float base_lr);

}  // namespace braid::optim
