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

// Linear decay: lr = base up to step `start`, then final + (base - final) * (end - step) /
// (end - start) until step `end`, final after (as DeepSpeed's WarmupDecayLR after its
// warm-up, and PyTorch's LinearLR reaching its end factor at total_iters).
class LinearSchedule final : public Schedule {
 public:
  LinearSchedule(float base_lr, int64_t start_step, int64_t end_step, float final_lr);
  float lr(int64_t step) const override;

 private:
  float base_;
  int64_t start_, end_;
  float final_;
};

// A cosine with its own span and floor: lr = base up to step `start` (exclusive), then
// base * (min_ratio + (1 - min_ratio) * (1 + cos(pi * p)) / 2) with p = (step - start + 1) /
// (end - start): the first step after `start - 1` is already one step in, and step end - 1
// (the last of an `end`-step run) is at the floor base * min_ratio, held after (as DeepSpeed's
// WarmupCosineLR after its warm-up, which rises again past the end where this holds).
class FloorCosineSchedule final : public Schedule {
 public:
  FloorCosineSchedule(float base_lr, int64_t start_step, int64_t end_step, double min_ratio);
  float lr(int64_t step) const override;

 private:
  float base_;
  int64_t start_, end_;
  double min_ratio_;
};

enum class Ramp { linear, log };

// A warm-up from its own start lr: for step < warmup, lr = start + (inner.lr(step) - start) * g
// with start = start_ratio * base_lr and g = step / warmup (linear) or ln(step + 1) /
// ln(warmup) (log, warmup >= 2: steeper early, at the inner lr on step warmup - 1);
// inner.lr(step) after. These are DeepSpeed's WarmupLR ramps (warmup_type linear / log).
class RampWarmupSchedule final : public Schedule {
 public:
  RampWarmupSchedule(std::unique_ptr<Schedule> inner, float base_lr, int64_t warmup_steps,
                     Ramp ramp, double start_ratio);
  float lr(int64_t step) const override;

 private:
  std::unique_ptr<Schedule> inner_;
  double start_;
  int64_t warmup_;
  Ramp ramp_;
};

// Another schedule `lag` steps late: lr(step) = inner.lr(max(step - lag, 0)), so its first
// value runs lag + 1 steps. lag 1 is a scheduler stepped after each optimizer step whose
// initial value the first step uses (DeepSpeed's, PyTorch's LambdaLR-style schedulers).
class LagSchedule final : public Schedule {
 public:
  LagSchedule(std::unique_ptr<Schedule> inner, int64_t lag_steps);
  float lr(int64_t step) const override;

 private:
  std::unique_ptr<Schedule> inner_;
  int64_t lag_;
};

// The linear scaling rule (Goyal et al. 2017): base_lr * batch / base_batch.
float scaled_lr(float base_lr, int64_t batch, int64_t base_batch);

struct ScheduleConfig {
  std::string name = "constant";       // constant, step, cosine, linear, warmup_cosine
  int64_t warmup_steps = 0;            // > 0 wraps the schedule in a warm-up
  std::string warmup_type = "factor";  // factor (WarmupSchedule), linear, log (RampWarmup...)
  double warmup_start_ratio = 0;       // linear, log: the warm-up's first lr / base_lr
  int64_t total_steps = 0;             // cosine, linear, warmup_cosine: where the decay ends
  int64_t step_size = 0;               // step
  float gamma = 0.1f;                  // step
  float min_lr = 0;                    // cosine, linear: the final lr
  double min_ratio = 0;                // warmup_cosine: the floor / base_lr
  int64_t lag_steps = 0;               // > 0: the whole schedule this many steps late
};

const std::vector<std::string_view>& schedule_names();

// Builds config.name starting from base_lr. linear and warmup_cosine decay from the end of
// the warm-up (step warmup_steps; 0 without one) to total_steps. An unknown name or a bad value is
// a braid::Error naming it (and listing the accepted names).
std::unique_ptr<Schedule> make_schedule(const ScheduleConfig& config, float base_lr);

}  // namespace braid::optim
