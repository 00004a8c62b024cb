// The partition tuner's search (partition_tuner.h) on given step times: its candidates, the
// steps each is in use, the settling steps left out, and a choice made on the times summed
// over ranks, ties to the larger partition.
#include "parallel/partition_tuner.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace braid::parallel {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Runs the tuner over `times` (the time of each step, by step); `other_rank` is added to
// the totals in the sum over ranks. Returns the partition in use at each step.
std::vector<size_t> run(PartitionTuner& tuner, const std::vector<double>& times,
                        const std::vector<double>& other_rank = {}) {
  std::vector<size_t> in_use;
  size_t current = 0;
  int sums = 0;
  for (size_t step = 0; step < times.size(); ++step) {
    const double previous = step == 0 ? -1.0 : times[step - 1];
    const std::optional<size_t> p = tuner.begin_step(previous, [&](double* v, size_t n) {
      ++sums;
      for (size_t i = 0; i < n && i < other_rank.size(); ++i) v[i] += other_rank[i];
    });
    if (p) {
      EXPECT_NE(*p, current) << "step " << step << " returned the partition already in use";
      current = *p;
    }
    in_use.push_back(current);
  }
  EXPECT_LE(sums, 1) << "one sum over ranks";
  return in_use;
}

TEST(PartitionTuner, CandidatesAreTheLargestBucketOverOneFourAndSixteen) {
  EXPECT_EQ(PartitionTuner(8 * kMiB).candidates(),
            (std::vector<size_t>{8 * kMiB, 2 * kMiB, kMiB / 2}));
  // Floored at kSmallest and distinct.
  EXPECT_EQ(PartitionTuner(10000).candidates(),
            (std::vector<size_t>{10000, PartitionTuner::kSmallest}));
  EXPECT_EQ(PartitionTuner(100).candidates(), (std::vector<size_t>{PartitionTuner::kSmallest}));
}

TEST(PartitionTuner, EachCandidateRunsItsStepsAndTheFastestStays) {
  PartitionTuner tuner(8 * kMiB, /*settle=*/1, /*measured=*/2);
  // Steps 0-2: 8 MiB, 3-5: 2 MiB, 6-8: 512 KiB, then the choice. A settling step's time
  // (the first of each) is left out: huge here, it would change the choice.
  const std::vector<double> times = {9, 0.30, 0.30, 9, 0.20, 0.20, 9, 0.25, 0.25, 0.2, 0.2};
  const std::vector<size_t> in_use = run(tuner, times);
  const std::vector<size_t> want = {8 * kMiB, 8 * kMiB, 8 * kMiB, 2 * kMiB, 2 * kMiB, 2 * kMiB,
                                    kMiB / 2, kMiB / 2, kMiB / 2, 2 * kMiB, 2 * kMiB};
  EXPECT_EQ(in_use, want);
  ASSERT_TRUE(tuner.done());
  EXPECT_EQ(tuner.chosen(), 2 * kMiB);
  EXPECT_EQ(tuner.mean_seconds(), (std::vector<double>{0.30, 0.20, 0.25}));
  EXPECT_NE(tuner.summary().find("partition tuned to 2 MiB"), std::string::npos) << tuner.summary();
}

TEST(PartitionTuner, TheChoiceIsOnTheTimesOfEveryRankAndTiesGoToTheLarger) {
  PartitionTuner tuner(8 * kMiB, 0, 1);
  // This rank alone would keep 512 KiB; the other rank's times make 8 MiB and 2 MiB tie
  // below it, and the tie goes to 8 MiB.
  run(tuner, {0.3, 0.3, 0.1, 0.1}, {0.1, 0.1, 0.5});
  ASSERT_TRUE(tuner.done());
  EXPECT_EQ(tuner.chosen(), 8 * kMiB);
}

// Given candidates (a parameter-server worker's pull credits), and no sum over ranks: the
// rank chooses on its own times, and says so.
TEST(PartitionTuner, GivenCandidatesAndNoSumChooseOnThisRanksTimes) {
  PartitionTuner tuner({300, 100, 40}, "pull credit", 0, 1);
  std::vector<size_t> in_use;
  const std::vector<double> times = {0.3, 0.2, 0.4, 0.1};
  for (size_t step = 0; step < times.size(); ++step)
    if (const auto c = tuner.begin_step(step == 0 ? -1.0 : times[step - 1], {}))
      in_use.push_back(*c);
  EXPECT_EQ(in_use, (std::vector<size_t>{300, 100, 40, 100}));
  ASSERT_TRUE(tuner.done());
  EXPECT_EQ(tuner.chosen(), 100u);
  EXPECT_NE(tuner.summary().find("pull credit tuned to 100 B"), std::string::npos)
      << tuner.summary();
  EXPECT_NE(tuner.summary().find("a step on this rank"), std::string::npos) << tuner.summary();
}

}  // namespace
}  // namespace braid::parallel
