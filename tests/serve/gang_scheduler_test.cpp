// The job server's placement rule (serve/gang_scheduler.h) on hand-made queues.
#include "serve/gang_scheduler.h"

#include <gtest/gtest.h>

#include <vector>

namespace braid::serve {
namespace {

std::vector<int64_t> jobs_of(const std::vector<JobPlacement>& p) {
  std::vector<int64_t> ids;
  for (const JobPlacement& j : p) ids.push_back(j.job);
  return ids;
}

TEST(GangScheduler, AJobStartsWithAllItsRanksOrNotAtAll) {
  // 3 free slots in all: the 4-rank job waits, and so does the 1-rank job behind it.
  const auto p = place_jobs({{1, 4, 0, 10}, {2, 1, 0, 11}}, {{7, 2}, {8, 1}});
  EXPECT_TRUE(p.empty());
}

TEST(GangScheduler, PriorityThenSubmissionOrder) {
  const auto p = place_jobs({{1, 2, 0, 10}, {2, 2, 5, 12}, {3, 2, 0, 9}}, {{7, 4}});
  EXPECT_EQ(jobs_of(p), (std::vector<int64_t>{2, 3}));
}

TEST(GangScheduler, OneWorkerWhenOneFitsTheSmallestThatDoes) {
  const auto p = place_jobs({{1, 2, 0, 1}}, {{7, 4}, {8, 2}, {9, 3}});
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].hosts.size(), 1u);
  EXPECT_EQ(p[0].hosts[0].worker, 8);
  EXPECT_EQ(p[0].hosts[0].ranks, 2);
}

TEST(GangScheduler, AcrossTheFewestWorkersWhenNoneFits) {
  const auto p = place_jobs({{1, 5, 0, 1}}, {{7, 1}, {8, 3}, {9, 2}});
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].hosts.size(), 2u);
  EXPECT_EQ(p[0].hosts[0].worker, 8);
  EXPECT_EQ(p[0].hosts[0].ranks, 3);
  EXPECT_EQ(p[0].hosts[1].worker, 9);
  EXPECT_EQ(p[0].hosts[1].ranks, 2);
}

TEST(GangScheduler, SlotsTakenByOneJobAreNotGivenToTheNext) {
  const auto p = place_jobs({{1, 2, 0, 1}, {2, 2, 0, 2}, {3, 1, 0, 3}}, {{7, 3}, {8, 1}});
  // Job 1 on worker 7 (3 >= 2, the only fit); job 2 on 7's last slot and 8's; job 3 waits.
  ASSERT_EQ(jobs_of(p), (std::vector<int64_t>{1, 2}));
  int on7 = 0, on8 = 0;
  for (const JobPlacement& j : p)
    for (const HostShare& h : j.hosts) (h.worker == 7 ? on7 : on8) += h.ranks;
  EXPECT_EQ(on7, 3);
  EXPECT_EQ(on8, 1);
}

TEST(GangScheduler, AOneHostJobWaitsForAWorkerWithTheRoomAndHoldsBackTheQueue) {
  // 4 free slots, but no worker has 3: the parameter-server job waits, and the job behind it.
  const auto waits = place_jobs(
      {{.id = 1, .ranks = 3, .priority = 0, .submitted = 1, .one_host = true}, {2, 1, 0, 2}},
      {{7, 2}, {8, 2}});
  EXPECT_TRUE(waits.empty());
  const auto runs = place_jobs(
      {{.id = 1, .ranks = 3, .priority = 0, .submitted = 1, .one_host = true}}, {{7, 2}, {8, 3}});
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(runs[0].hosts.size(), 1u);
  EXPECT_EQ(runs[0].hosts[0].worker, 8);
}

}  // namespace
}  // namespace braid::serve
