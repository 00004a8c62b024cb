// Which clients train in a round and which worker trains each (fedavg_round.h): the pick is
// seeded, distinct and of size max(1, round(C K)); the deal gives every chosen client to
// exactly one worker, balanced by sample count.
#include "parallel/fedavg_round.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "core/error.h"
#include "expect_error.h"

namespace braid::parallel {
namespace {

TEST(FedAvgRound, ClientsPerRoundIsCTimesKRoundedAndAtLeastOne) {
  EXPECT_EQ(clients_per_round(100, 0.1), 10);
  EXPECT_EQ(clients_per_round(10, 0.01), 1);
  EXPECT_EQ(clients_per_round(5, 0.5), 3);  // 2.5: half away from zero
  EXPECT_EQ(clients_per_round(7, 1.0), 7);
  EXPECT_EQ(clients_per_round(1, 0.3), 1);
  expect_error_naming([] { clients_per_round(10, 0.0); }, "fedavg.fraction");
  expect_error_naming([] { clients_per_round(10, 1.5); }, "fedavg.fraction");
  expect_error_naming([] { clients_per_round(0, 0.5); }, "fedavg.clients");
}

TEST(FedAvgRound, ChoiceIsSeededDistinctAndOfTheRightSize) {
  for (const auto& [K, C] : {std::pair{100, 0.1}, {10, 0.3}, {7, 1.0}, {1000, 0.999}, {3, 0.01}}) {
    const int m = clients_per_round(K, C);
    for (int64_t r = 0; r < 20; ++r) {
      const std::vector<int> got = choose_clients(11, r, K, C);
      ASSERT_EQ(static_cast<int>(got.size()), m) << K << " " << C;
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
      EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end()) << "a client twice";
      EXPECT_GE(got.front(), 0);
      EXPECT_LT(got.back(), K);
      EXPECT_EQ(got, choose_clients(11, r, K, C)) << "not a function of its arguments";
    }
  }
  // Rounds and seeds pick differently.
  EXPECT_NE(choose_clients(11, 0, 100, 0.1), choose_clients(11, 1, 100, 0.1));
  EXPECT_NE(choose_clients(11, 0, 100, 0.1), choose_clients(12, 0, 100, 0.1));
  // Full participation is everyone.
  std::vector<int> all(9);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(choose_clients(5, 3, 9, 1.0), all);
}

// Over many rounds every client is picked about equally often: 3 of 10 per round for 2000
// rounds is 600 picks each, with a standard deviation of ~20; a pick biased to some ids
// (say, never the last) leaves the band.
TEST(FedAvgRound, ChoiceIsUniformOverTheClients) {
  std::vector<int> count(10, 0);
  for (int64_t r = 0; r < 2000; ++r)
    for (const int c : choose_clients(3, r, 10, 0.3)) ++count[static_cast<size_t>(c)];
  for (int c = 0; c < 10; ++c) {
    EXPECT_GT(count[static_cast<size_t>(c)], 500) << "client " << c;
    EXPECT_LT(count[static_cast<size_t>(c)], 700) << "client " << c;
  }
}

TEST(FedAvgRound, EveryChosenClientGoesToExactlyOneWorkerBalancedBySamples) {
  std::vector<int64_t> samples(40);
  for (size_t c = 0; c < samples.size(); ++c) samples[c] = 1 + static_cast<int64_t>((c * 37) % 23);
  const std::vector<int> chosen = choose_clients(8, 2, 40, 0.5);
  for (int W = 1; W <= 25; ++W) {
    const auto deal = assign_clients(chosen, samples, W);
    ASSERT_EQ(static_cast<int>(deal.size()), W);
    std::vector<int> seen;
    int64_t most = 0, least = INT64_MAX;
    for (const auto& list : deal) {
      EXPECT_TRUE(std::is_sorted(list.begin(), list.end()));
      seen.insert(seen.end(), list.begin(), list.end());
      int64_t load = 0;
      for (const int c : list) load += samples[static_cast<size_t>(c)];
      most = std::max(most, load);
      least = std::min(least, load);
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, chosen) << W << " workers";
    // Largest first, each to the least loaded: the last client placed went to the least
    // loaded worker, so no worker ends more than one client's size above another (an
    // empty worker included).
    EXPECT_LE(most - least, *std::max_element(samples.begin(), samples.end())) << W;
    EXPECT_EQ(deal, assign_clients(chosen, samples, W));
  }
}

TEST(FedAvgRound, WithoutSampleCountsTheDealIsRoundRobin) {
  const std::vector<int> chosen{1, 4, 6, 7, 9};
  const auto deal = assign_clients(chosen, {}, 2);
  EXPECT_EQ(deal[0], (std::vector<int>{1, 6, 9}));
  EXPECT_EQ(deal[1], (std::vector<int>{4, 7}));
  const auto many = assign_clients(chosen, {}, 8);
  EXPECT_TRUE(many[5].empty() && many[6].empty() && many[7].empty());
  expect_error_naming([&] { assign_clients(chosen, {}, 0); }, "workers");
  const std::vector<int64_t> too_few{1, 2, 3};
  expect_error_naming([&] { assign_clients(chosen, too_few, 2); }, "sample count");
  const std::vector<int> twice{2, 2};
  expect_error_naming([&] { assign_clients(twice, {}, 2); }, "twice");
}

}  // namespace
}  // namespace braid::parallel
