#include "optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

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

TEST(Schedule, LinearScalingRule) {
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, 8192, 256), 3.2f);
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, 128, 256), 0.05f);
  EXPECT_THROW(scaled_lr(0.1f, 0, 256), Error);
}

}  // namespace
}  // namespace braid::optim
