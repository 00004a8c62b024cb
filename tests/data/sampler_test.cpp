#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace braid::data {
namespace {

std::vector<int64_t> epoch_indices(Sampler& s, int64_t epoch) {
  s.set_epoch(epoch);
  std::vector<int64_t> out;
  for (int64_t i; (i = s.next()) >= 0;) out.push_back(i);
  return out;
}

TEST(Sampler, EachEpochIsAPermutation) {
  for (const int64_t n : {0, 1, 2, 7, 1000}) {
    Sampler s(n, {.seed = 11});
    for (int64_t e = 0; e < 3; ++e) {
      auto idx = epoch_indices(s, e);
      ASSERT_EQ(static_cast<int64_t>(idx.size()), n);
      std::sort(idx.begin(), idx.end());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(idx[static_cast<size_t>(i)], i);
    }
  }
}

TEST(Sampler, MatchesFisherYatesReference) {
  const int64_t n = 50;
  Sampler s(n, {.seed = 123});
  const auto got = epoch_indices(s, 4);
  std::vector<int64_t> want(n);
  std::iota(want.begin(), want.end(), 0);
  Rng rng(123, 4);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(want[static_cast<size_t>(i)], want[rng.below(static_cast<uint64_t>(i + 1))]);
  EXPECT_EQ(got, want);
}

TEST(Sampler, DeterministicPerSeedAndEpoch) {
  Sampler a(100, {.seed = 1}), b(100, {.seed = 1}), c(100, {.seed = 2});
  EXPECT_EQ(epoch_indices(a, 3), epoch_indices(b, 3));
  EXPECT_NE(epoch_indices(a, 3), epoch_indices(a, 4));
  EXPECT_NE(epoch_indices(a, 3), epoch_indices(c, 3));
  // The epoch, not the history, decides the order.
  Sampler d(100, {.seed = 1});
  EXPECT_EQ(epoch_indices(d, 4), epoch_indices(a, 4));
}

TEST(Sampler, NoShuffleIsTheIdentity) {
  Sampler s(5, {.shuffle = false});
  EXPECT_EQ(epoch_indices(s, 9), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, ShardingCoversAllIndicesWithEqualCounts) {
  for (const int64_t n : {1, 2, 9, 10, 11, 100}) {
    const int world = 3;
    Sampler whole(n, {.seed = 5});
    whole.set_epoch(2);
    const auto perm = whole.permutation();
    std::vector<int64_t> padded = perm;
    for (size_t i = 0; padded.size() % world != 0; ++i) padded.push_back(perm[i % perm.size()]);
    std::vector<int64_t> all;
    for (int r = 0; r < world; ++r) {
      Sampler s(n, {.seed = 5, .rank = r, .world = world});
      const auto idx = epoch_indices(s, 2);
      EXPECT_EQ(static_cast<int64_t>(idx.size()), (n + world - 1) / world);
      for (size_t j = 0; j < idx.size(); ++j) {
        EXPECT_EQ(idx[j], padded[j * world + static_cast<size_t>(r)]);  // indices[r::w]
        EXPECT_EQ(s.global_position(static_cast<int64_t>(j)), static_cast<int64_t>(j) * world + r);
      }
      all.insert(all.end(), idx.begin(), idx.end());
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    EXPECT_EQ(static_cast<int64_t>(all.size()), n) << "n=" << n;
  }
}

TEST(Sampler, WorldOfOneIsThePlainPermutation) {
  Sampler a(20, {.seed = 8}), b(20, {.seed = 8, .rank = 0, .world = 1});
  a.set_epoch(1);
  EXPECT_EQ(epoch_indices(b, 1), a.permutation());
}

TEST(Sampler, StateRestoresPosition) {
  Sampler a(30, {.seed = 4, .rank = 1, .world = 2});
  a.set_epoch(6);
  for (int i = 0; i < 5; ++i) a.next();
  const SamplerState st = a.state();
  EXPECT_EQ(st.epoch, 6);
  EXPECT_EQ(st.cursor, 5);
  std::vector<int64_t> rest_a;
  for (int64_t i; (i = a.next()) >= 0;) rest_a.push_back(i);

  Sampler b(30, {.seed = 4, .rank = 1, .world = 2});
  b.restore(st);
  std::vector<int64_t> rest_b;
  for (int64_t i; (i = b.next()) >= 0;) rest_b.push_back(i);
  EXPECT_EQ(rest_a, rest_b);
  EXPECT_EQ(rest_b.size(), 10u);
  EXPECT_THROW(b.restore({6, 16}), Error);
}

TEST(Sampler, BadOptionsAreErrors) {
  EXPECT_THROW(Sampler(10, {.rank = 3, .world = 3}), Error);
  EXPECT_THROW(Sampler(10, {.world = 0}), Error);
  EXPECT_THROW(Sampler(-1, {}), Error);
  Sampler s(10, {});
  EXPECT_THROW(s.index(0), Error);  // no epoch yet
  EXPECT_THROW(s.set_epoch(-1), Error);
}

}  // namespace
}  // namespace braid::data
