#include "optim/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"

namespace braid::optim {
namespace {

TEST(Schedule, ConstantIsConstant) {
  ConstantSchedule s(0.1f);
  EXPECT_EQ(s.lr(0), 0.1f);
  EXPECT_EQ(s.lr(12345), 0.1f);
}

TEST(Schedule, StepDecaysByGammaEveryStepSize) {
  StepSchedule s(1.0f, 3, 0.5f);
  EXPECT_FLOAT_EQ(s.lr(0), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(2), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(3), 0.5f);
  EXPECT_FLOAT_EQ(s.lr(5), 0.5f);
  EXPECT_FLOAT_EQ(s.lr(6), 0.25f);
  EXPECT_FLOAT_EQ(s.lr(31), 1.0f / 1024);
}

TEST(Schedule, CosineAnnealsFromBaseToMinAndStays) {
  CosineSchedule s(1.0f, 10, 0.1f);
  EXPECT_FLOAT_EQ(s.lr(0), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(5), 0.55f);
  EXPECT_FLOAT_EQ(s.lr(2),
                  static_cast<float>(0.1 + 0.9 * (1 + std::cos(0.2 * std::numbers::pi)) / 2));
  EXPECT_FLOAT_EQ(s.lr(10), 0.1f);
  EXPECT_FLOAT_EQ(s.lr(11), 0.1f);
  EXPECT_FLOAT_EQ(s.lr(1000), 0.1f);
}

TEST(Schedule, WarmupRampsLinearlyThenHandsOver) {
  WarmupSchedule s(std::make_unique<ConstantSchedule>(0.4f), 4);
  EXPECT_FLOAT_EQ(s.lr(0), 0.1f);
  EXPECT_FLOAT_EQ(s.lr(1), 0.2f);
  EXPECT_FLOAT_EQ(s.lr(2), 0.3f);
  EXPECT_FLOAT_EQ(s.lr(3), 0.4f);
  EXPECT_FLOAT_EQ(s.lr(4), 0.4f);
  EXPECT_FLOAT_EQ(s.lr(100), 0.4f);
}

TEST(Schedule, FactoryWrapsWarmupAroundTheNamedSchedule) {
  const auto s = make_schedule(
      ScheduleConfig{.name = "cosine", .warmup_steps = 2, .total_steps = 10, .min_lr = 0}, 1.0f);
  const double inner1 = (1 + std::cos(0.1 * std::numbers::pi)) / 2;
  EXPECT_FLOAT_EQ(s->lr(0), 0.5f);  // inner(0) = 1, factor 1/2
  EXPECT_FLOAT_EQ(s->lr(1), static_cast<float>(inner1));
  EXPECT_FLOAT_EQ(s->lr(10), 0.0f);
  const auto step =
      make_schedule(ScheduleConfig{.name = "step", .step_size = 2, .gamma = 0.1f}, 2.0f);
  EXPECT_FLOAT_EQ(step->lr(1), 2.0f);
  EXPECT_FLOAT_EQ(step->lr(2), 0.2f);
  EXPECT_FLOAT_EQ(make_schedule(ScheduleConfig{}, 0.3f)->lr(9), 0.3f);
}

TEST(Schedule, BadConfigsAreErrorsNamingTheKey) {
  const auto expect_error = [](const ScheduleConfig& c, const std::string& word) {
    try {
      make_schedule(c, 0.1f);
      ADD_FAILURE() << "no error for " << word;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  expect_error({.name = "onecycle"}, "constant, step, cosine");
  expect_error({.name = "step", .step_size = 0}, "step_size");
  expect_error({.name = "cosine", .total_steps = 0}, "total_steps");
  expect_error({.name = "constant", .warmup_steps = -1}, "warmup_steps");
  EXPECT_THROW(ConstantSchedule(-1.0f), Error);
  EXPECT_THROW(ConstantSchedule(0.1f).lr(-1), Error);
}

// DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py) as DeepSpeed runs them: the
// scheduler is built before the first optimizer step (last_batch_iteration -1: WarmupLR's
// get_lr gives warmup_min_lr, WarmupCosineLR's 0) and stepped after each one, so optimizer
// step s >= 1 runs at iteration i = s - 1. W is max(2, warmup_num_steps).
double ds_gamma(int64_t i, int64_t w, bool log) {
  return log ? 1.0 / std::log(static_cast<double>(w)) * std::log(static_cast<double>(i + 1))
             : static_cast<double>(i) / static_cast<double>(w);
}
double ds_warmup_lr(int64_t s, double lo, double hi, int64_t w, bool log) {
  if (s == 0) return lo;
  const int64_t i = s - 1;
  return i < w ? lo + (hi - lo) * ds_gamma(i, w, log) : hi;
}
double ds_warmup_decay_lr(int64_t s, double lo, double hi, int64_t w, int64_t total, bool log) {
  if (s == 0) return lo;
  const int64_t i = s - 1;
  const double g = i < w ? ds_gamma(i, w, log)
                         : std::max(0.0, static_cast<double>(total - i) /
                                             std::max(1.0, static_cast<double>(total - w)));
  return lo + (hi - lo) * g;
}
double ds_warmup_cosine_lr(int64_t s, double lr, double min_ratio, int64_t w, int64_t total,
                           double cos_min, bool log) {
  if (s == 0) return 0.0;
  const int64_t i = s - 1;
  if (i < w) return lr * (min_ratio + ds_gamma(i, w, log) * (1 - min_ratio));
  const double real = static_cast<double>(i - w + 1), span = static_cast<double>(total - w);
  return lr * std::max(0.0, cos_min +
                                (1 - cos_min) * (1 + std::cos(std::numbers::pi * real / span)) / 2);
}

// WarmupLR {warmup_min_lr 0.01, warmup_max_lr 0.1, warmup_num_steps 10}: braid's constant
// schedule at lr 0.1 with a log (or linear) warm-up from ratio 0.1, one step late.
TEST(Schedule, RampWarmupLaggedGivesDeepSpeedsWarmupLR) {
  for (const char* type : {"log", "linear"}) {
    const bool log = std::string(type) == "log";
    const auto s = make_schedule({.name = "constant",
                                  .warmup_steps = 10,
                                  .warmup_type = type,
                                  .warmup_start_ratio = 0.1,
                                  .lag_steps = 1},
                                 0.1f);
    for (int64_t step = 0; step <= 40; ++step)
      EXPECT_FLOAT_EQ(s->lr(step), static_cast<float>(ds_warmup_lr(step, 0.01, 0.1, 10, log)))
          << type << " step " << step;
  }
  // By hand: steps 0 and 1 both at warmup_min_lr, then 0.01 + 0.09 g(s - 1).
  const auto log = make_schedule({.name = "constant",
                                  .warmup_steps = 10,
                                  .warmup_type = "log",
                                  .warmup_start_ratio = 0.1,
                                  .lag_steps = 1},
                                 0.1f);
  EXPECT_FLOAT_EQ(log->lr(0), 0.01f);
  EXPECT_FLOAT_EQ(log->lr(1), 0.01f);
  EXPECT_FLOAT_EQ(log->lr(2), static_cast<float>(0.01 + 0.09 * std::log(2.0) / std::log(10.0)));
  EXPECT_FLOAT_EQ(log->lr(5), static_cast<float>(0.01 + 0.09 * std::log(5.0) / std::log(10.0)));
  EXPECT_FLOAT_EQ(log->lr(10), 0.1f);  // i = 9: ln 10 / ln 10
  EXPECT_FLOAT_EQ(log->lr(11), 0.1f);
  EXPECT_FLOAT_EQ(log->lr(100000), 0.1f);
  const auto lin = make_schedule({.name = "constant",
                                  .warmup_steps = 10,
                                  .warmup_type = "linear",
                                  .warmup_start_ratio = 0.1,
                                  .lag_steps = 1},
                                 0.1f);
  EXPECT_FLOAT_EQ(lin->lr(0), 0.01f);
  EXPECT_FLOAT_EQ(lin->lr(1), 0.01f);
  EXPECT_FLOAT_EQ(lin->lr(5), 0.046f);   // 0.01 + 0.09 x 4/10
  EXPECT_FLOAT_EQ(lin->lr(10), 0.091f);  // 0.01 + 0.09 x 9/10
  EXPECT_FLOAT_EQ(lin->lr(11), 0.1f);
  EXPECT_FLOAT_EQ(lin->lr(500), 0.1f);
}

// WarmupDecayLR {warmup_min_lr 0.01, warmup_max_lr 0.1, warmup_num_steps 10, total_num_steps
// 30, linear}: braid's linear schedule to min_lr 0.01 at step 30.
TEST(Schedule, LinearDecayLaggedGivesDeepSpeedsWarmupDecayLR) {
  const auto s = make_schedule({.name = "linear",
                                .warmup_steps = 10,
                                .warmup_type = "linear",
                                .warmup_start_ratio = 0.1,
                                .total_steps = 30,
                                .min_lr = 0.01f,
                                .lag_steps = 1},
                               0.1f);
  for (int64_t step = 0; step <= 60; ++step)
    EXPECT_FLOAT_EQ(s->lr(step),
                    static_cast<float>(ds_warmup_decay_lr(step, 0.01, 0.1, 10, 30, false)))
        << "step " << step;
  EXPECT_FLOAT_EQ(s->lr(0), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(1), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(6), 0.055f);    // i = 5, mid-warm-up: 0.01 + 0.09 x 5/10
  EXPECT_FLOAT_EQ(s->lr(10), 0.091f);   // i = 9
  EXPECT_FLOAT_EQ(s->lr(11), 0.1f);     // i = 10: (30 - 10) / 20
  EXPECT_FLOAT_EQ(s->lr(21), 0.055f);   // i = 20: mid-decay, 10 / 20
  EXPECT_FLOAT_EQ(s->lr(30), 0.0145f);  // i = 29: 1 / 20
  EXPECT_FLOAT_EQ(s->lr(31), 0.01f);    // i = 30: the end
  EXPECT_FLOAT_EQ(s->lr(1000), 0.01f);  // past it
  // Without a lag or warm-up: lr at step 0, min_lr at total_steps.
  LinearSchedule plain(1.0f, 0, 4, 0.0f);
  EXPECT_FLOAT_EQ(plain.lr(0), 1.0f);
  EXPECT_FLOAT_EQ(plain.lr(1), 0.75f);
  EXPECT_FLOAT_EQ(plain.lr(4), 0.0f);
  EXPECT_FLOAT_EQ(plain.lr(9), 0.0f);
}

// WarmupCosineLR {warmup_num_steps 10, total_num_steps 30, cos_min_ratio 0.1, log} over an
// optimizer lr of 0.1: braid's warmup_cosine, min_ratio 0.1.
TEST(Schedule, FloorCosineLaggedGivesDeepSpeedsWarmupCosineLR) {
  const auto s = make_schedule({.name = "warmup_cosine",
                                .warmup_steps = 10,
                                .warmup_type = "log",
                                .total_steps = 30,
                                .min_ratio = 0.1,
                                .lag_steps = 1},
                               0.1f);
  for (int64_t step = 0; step <= 30; ++step)  // DeepSpeed's cosine rises again after
    EXPECT_FLOAT_EQ(s->lr(step),
                    static_cast<float>(ds_warmup_cosine_lr(step, 0.1, 0, 10, 30, 0.1, true)))
        << "step " << step;
  EXPECT_FLOAT_EQ(s->lr(0), 0.0f);
  EXPECT_FLOAT_EQ(s->lr(1), 0.0f);
  EXPECT_FLOAT_EQ(s->lr(5), static_cast<float>(0.1 * std::log(5.0) / std::log(10.0)));
  EXPECT_FLOAT_EQ(s->lr(10), 0.1f);  // i = 9: the warm-up's end
  EXPECT_FLOAT_EQ(
      s->lr(11),  // i = 10: already 1/20 of the cosine
      static_cast<float>(0.1 * (0.1 + 0.9 * (1 + std::cos(std::numbers::pi / 20)) / 2)));
  EXPECT_FLOAT_EQ(s->lr(20), 0.055f);  // i = 19: half way, 0.1 x (0.1 + 0.9 / 2)
  EXPECT_FLOAT_EQ(s->lr(30), 0.01f);   // i = 29: the floor, lr x cos_min_ratio
  EXPECT_FLOAT_EQ(s->lr(31), 0.01f);   // held (DeepSpeed's: 0.1 x (0.1 + 0.9 x 0.00616))
  EXPECT_FLOAT_EQ(s->lr(5000), 0.01f);
  // A start ratio, no lag: from lr x 0.2 at step 0, linearly.
  const auto r = make_schedule({.name = "warmup_cosine",
                                .warmup_steps = 4,
                                .warmup_type = "linear",
                                .warmup_start_ratio = 0.2,
                                .total_steps = 8,
                                .min_ratio = 0},
                               1.0f);
  EXPECT_FLOAT_EQ(r->lr(0), 0.2f);
  EXPECT_FLOAT_EQ(r->lr(2), 0.6f);
  EXPECT_FLOAT_EQ(r->lr(4), static_cast<float>((1 + std::cos(std::numbers::pi / 4)) / 2));
  EXPECT_FLOAT_EQ(r->lr(7), 0.0f);
}

TEST(Schedule, NewOptionsCheckTheirValues) {
  EXPECT_THROW(make_schedule({.name = "linear", .warmup_steps = 10, .total_steps = 10}, 0.1f),
               Error);
  EXPECT_THROW(make_schedule({.name = "warmup_cosine", .total_steps = 0}, 0.1f), Error);
  EXPECT_THROW(make_schedule({.warmup_steps = 1, .warmup_type = "log"}, 0.1f), Error);
  EXPECT_THROW(make_schedule({.warmup_steps = 4, .warmup_type = "exp"}, 0.1f), Error);
  EXPECT_THROW(
      make_schedule({.warmup_steps = 4, .warmup_type = "linear", .warmup_start_ratio = 1.5}, 0.1f),
      Error);
  EXPECT_THROW(make_schedule({.lag_steps = -1}, 0.1f), Error);
}

TEST(Schedule, LinearScalingRule) {
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, 8192, 256), 3.2f);
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, 128, 256), 0.05f);
  EXPECT_THROW(scaled_lr(0.1f, 0, 256), Error);
}

}  // namespace
}  // namespace braid::optim
