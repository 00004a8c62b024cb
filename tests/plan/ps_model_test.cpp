// Parameter servers' rules over workers whose compute varies: the order statistics against
// the normal's closed form, and sync, backup workers, async and SSP against each other and
// against what identical workers must give.
#include "plan/ps_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace braid::plan {
namespace {

TEST(PsModel, OrderStatisticsMatchTheNormalsClosedForm) {
  // The larger of two normal draws: mean + sigma / sqrt(pi).
  EXPECT_NEAR(expected_order_statistic(2, 2, 0.1), 1 + 0.1 / std::sqrt(M_PI), 0.002);
  EXPECT_NEAR(expected_order_statistic(2, 1, 0.1), 1 - 0.1 / std::sqrt(M_PI), 0.002);
  // The median of three is the mean.
  EXPECT_NEAR(expected_order_statistic(3, 2, 0.2), 1.0, 0.003);
  EXPECT_DOUBLE_EQ(expected_order_statistic(8, 8, 0), 1.0);
  EXPECT_THROW(expected_order_statistic(4, 5, 0.1), Error);
}

TEST(PsModel, IdenticalWorkersLoseOnlyWhatBackupWorkersDiscard) {
  // No jitter: a backup worker's gradient is thrown away for nothing, and async or SSP run
  // at sync's rate (the servers far from full).
  const PsRate sync = ps_rate(PsMode::sync, 8, 0, 2, 0, 1.0, 0.1, 0.01, 16);
  const PsRate backup = ps_rate(PsMode::sync, 8, 1, 2, 0, 1.0, 0.1, 0.01, 16);
  const PsRate async = ps_rate(PsMode::async, 8, 0, 2, 0, 1.0, 0.1, 0.001, 16);
  const PsRate ssp = ps_rate(PsMode::ssp, 8, 0, 2, 0, 1.0, 0.1, 0.001, 16);
  EXPECT_DOUBLE_EQ(sync.samples_per_s, 8 * 16 / 1.1);
  EXPECT_DOUBLE_EQ(backup.samples_per_s, sync.samples_per_s * 7 / 8);
  EXPECT_DOUBLE_EQ(async.samples_per_s, sync.samples_per_s);
  EXPECT_DOUBLE_EQ(ssp.samples_per_s, sync.samples_per_s);
}

TEST(PsModel, WithJitterSyncWaitsForTheSlowestAndTheOtherRulesLessSo) {
  const double jitter = 0.2;
  const PsRate sync = ps_rate(PsMode::sync, 16, 0, 2, jitter, 1.0, 0.0, 0.0, 1);
  const PsRate backup = ps_rate(PsMode::sync, 16, 2, 2, jitter, 1.0, 0.0, 0.0, 1);
  const PsRate ssp = ps_rate(PsMode::ssp, 16, 0, 2, jitter, 1.0, 0.0, 1e-6, 1);
  const PsRate async = ps_rate(PsMode::async, 16, 0, 2, jitter, 1.0, 0.0, 1e-6, 1);
  EXPECT_NEAR(sync.step_s, expected_order_statistic(16, 16, jitter), 1e-12);
  EXPECT_LT(backup.step_s, sync.step_s);  // the 14th of 16, not the last
  EXPECT_GT(ssp.samples_per_s, sync.samples_per_s);
  EXPECT_LT(ssp.samples_per_s, async.samples_per_s);
  // SSP with bound s spreads the slowest's lag over s + 1 steps.
  const double lag = expected_order_statistic(16, 16, jitter) - 1;
  EXPECT_NEAR(ssp.step_s, 1 + lag / 3, 1e-12);
  EXPECT_NEAR(async.samples_per_s, 16.0, 1e-9);
}

TEST(PsModel, AsyncIsCappedByWhatTheServersApply) {
  // Each update costs the servers 0.5 s: at most 2 updates a second, however many workers.
  const PsRate async = ps_rate(PsMode::async, 64, 0, 2, 0, 1.0, 0.0, 0.5, 4);
  EXPECT_DOUBLE_EQ(async.samples_per_s, 4 / 0.5);
}

}  // namespace
}  // namespace braid::plan
