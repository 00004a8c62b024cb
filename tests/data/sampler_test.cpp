#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
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

// torch.utils.data.DistributedSampler, written out: indices = perm (+ head padding) or
// perm[:total] (drop_last), then indices[rank:total:world]; shard is indices[rank:N:world].
std::vector<int64_t> reference_shard(const std::vector<int64_t>& perm, int rank, int world,
                                     ShardMode mode) {
  const auto n = static_cast<int64_t>(perm.size());
  int64_t total = n;
  if (mode == ShardMode::pad) total = (n + world - 1) / world * world;
  if (mode == ShardMode::drop_last) total = n / world * world;
  std::vector<int64_t> out;
  for (int64_t p = rank; p < total; p += world) out.push_back(perm[static_cast<size_t>(p % n)]);
  return out;
}

TEST(SamplerModes, MatchTorchReferenceAndCoverAsDocumented) {
  for (const ShardMode mode : {ShardMode::pad, ShardMode::drop_last, ShardMode::shard}) {
    for (int64_t n = 0; n <= 23; ++n) {
      for (const int world : {1, 2, 3, 4, 5, 7, 8, 16, 30}) {
        SCOPED_TRACE(testing::Message() << shard_mode_name(mode) << " n=" << n << " w=" << world);
        Sampler whole(n, {.seed = 3});
        whole.set_epoch(1);
        std::vector<int64_t> seen(static_cast<size_t>(n), 0);
        int64_t total = 0;
        for (int r = 0; r < world; ++r) {
          Sampler s(n, {.seed = 3, .rank = r, .world = world, .mode = mode});
          const auto idx = epoch_indices(s, 1);
          ASSERT_EQ(idx, reference_shard(whole.permutation(), r, world, mode)) << "rank " << r;
          ASSERT_EQ(s.num_samples(), static_cast<int64_t>(idx.size()));
          ASSERT_EQ(shard_size(n, r, world, mode), s.num_samples());
          for (const int64_t i : idx) ++seen[static_cast<size_t>(i)];
          total += s.num_samples();
          if (mode != ShardMode::shard) {
            EXPECT_EQ(s.num_samples(),
                      mode == ShardMode::pad ? (n + world - 1) / world : n / world);
          }
        }
        const int64_t once = std::count(seen.begin(), seen.end(), 1);
        const int64_t twice = std::count(seen.begin(), seen.end(), 2);
        const int64_t never = std::count(seen.begin(), seen.end(), 0);
        switch (mode) {
          case ShardMode::shard:  // disjoint and covering: every sample exactly once
            EXPECT_EQ(total, n);
            EXPECT_EQ(once, n);
            break;
          case ShardMode::pad:  // covering; only the head repeats, to a multiple of w
            EXPECT_EQ(never, 0);
            EXPECT_EQ(total, (n + world - 1) / world * world);
            if (n >= world) {
              EXPECT_EQ(twice, total - n);
            }
            break;
          case ShardMode::drop_last:  // disjoint; only the tail is skipped
            EXPECT_EQ(twice, 0);
            EXPECT_EQ(once, total);
            EXPECT_EQ(never, n % world);
            break;
          case ShardMode::local:  // not among the modes swept here (npy_shards_test.cpp)
            break;
        }
      }
    }
  }
}

TEST(SamplerModes, PadIsTheDefaultAndUnchanged) {
  // The default mode is the one every existing caller had: bitwise the same order.
  for (const int world : {1, 3}) {
    for (int r = 0; r < world; ++r) {
      Sampler a(11, {.seed = 5, .rank = r, .world = world});
      Sampler b(11, {.seed = 5, .rank = r, .world = world, .mode = ShardMode::pad});
      EXPECT_EQ(a.options().mode, ShardMode::pad);
      EXPECT_EQ(epoch_indices(a, 2), epoch_indices(b, 2));
    }
  }
}

TEST(SamplerModes, ShardGivesEmptyShardsBeyondN) {
  Sampler s(3, {.shuffle = false, .rank = 4, .world = 6, .mode = ShardMode::shard});
  EXPECT_EQ(s.num_samples(), 0);
  EXPECT_TRUE(epoch_indices(s, 0).empty());
  EXPECT_EQ(s.next(), -1);
  Sampler first(3, {.shuffle = false, .rank = 2, .world = 6, .mode = ShardMode::shard});
  EXPECT_EQ(epoch_indices(first, 0), (std::vector<int64_t>{2}));
  Sampler none(0, {.rank = 0, .world = 2, .mode = ShardMode::shard});
  EXPECT_TRUE(epoch_indices(none, 0).empty());
}

TEST(SamplerModes, SetEpochReshufflesAndSeedsDecideForEveryMode) {
  for (const ShardMode mode : {ShardMode::pad, ShardMode::drop_last, ShardMode::shard}) {
    SCOPED_TRACE(shard_mode_name(mode));
    const SamplerOptions o{.seed = 21, .rank = 1, .world = 4, .mode = mode};
    Sampler a(203, o), b(203, o);
    SamplerOptions other = o;
    other.seed = 22;
    Sampler c(203, other);
    EXPECT_EQ(epoch_indices(a, 0), epoch_indices(b, 0));
    EXPECT_NE(epoch_indices(a, 0), epoch_indices(a, 1));
    EXPECT_NE(epoch_indices(a, 1), epoch_indices(c, 1));
    EXPECT_EQ(epoch_indices(b, 1), epoch_indices(a, 1));
  }
}

TEST(SamplerModes, ParseNamesTheKey) {
  EXPECT_EQ(parse_shard_mode("drop_last"), ShardMode::drop_last);
  EXPECT_EQ(parse_shard_mode("shard"), ShardMode::shard);
  EXPECT_EQ(parse_shard_mode("pad"), ShardMode::pad);
  try {
    parse_shard_mode("padding", "eval.sharding");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'eval.sharding' is 'padding'"), std::string::npos)
        << e.what();
  }
}

TEST(SamplerModes, RestoreChecksTheModesLength) {
  Sampler pad(10, {.rank = 0, .world = 4});
  pad.set_epoch(0);
  for (int i = 0; i < 3; ++i) pad.next();
  Sampler drop(10, {.rank = 0, .world = 4, .mode = ShardMode::drop_last});
  EXPECT_THROW(drop.restore(pad.state()), Error);  // 3 > floor(10/4)
}

TEST(SamplerSteps, SharesAreCeilOfTheRest) {
  EXPECT_EQ(batch_share(64, 0, 3), 22);
  EXPECT_EQ(batch_share(64, 1, 3), 21);
  EXPECT_EQ(batch_share(64, 2, 3), 21);
  for (const int64_t G : {1, 2, 7, 10, 12, 64})
    for (int w = 1; w <= G && w <= 16; ++w) {
      int64_t sum = 0;
      for (int r = 0; r < w; ++r) {
        const int64_t n = batch_share(G, r, w);
        EXPECT_TRUE(n == G / w || n == G / w + 1) << G << " " << r << " " << w;
        sum += n;
      }
      EXPECT_EQ(sum, G) << "G=" << G << " w=" << w;
    }
  EXPECT_THROW(batch_share(2, 0, 3), Error);  // a rank with no sample of the step
  EXPECT_THROW(batch_share(8, 3, 3), Error);
}

TEST(SamplerSteps, EachStepIsItsBlockOnceAtEveryWorld) {
  for (const int64_t n : {0, 9, 10, 64, 100, 203}) {
    for (const int64_t G : {1, 3, 10, 12, 64}) {
      const int64_t steps = n / G;
      for (int w = 1; w <= 7 && w <= G; ++w) {
        std::vector<Sampler> ranks;
        for (int r = 0; r < w; ++r) {
          ranks.emplace_back(n,
                             SamplerOptions{.seed = 9, .rank = r, .world = w, .global_batch = G});
          ranks.back().set_epoch(3);
          // The epoch is whole steps, whatever the world; the tail is skipped.
          EXPECT_EQ(ranks.back().num_samples(), steps * batch_share(G, r, w));
        }
        const auto& perm = ranks[0].permutation();
        for (int64_t t = 0; t < steps; ++t) {
          std::vector<int64_t> positions;
          for (int r = 0; r < w; ++r) {
            const Sampler& s = ranks[static_cast<size_t>(r)];
            for (int64_t k = 0; k < s.step_share(); ++k) {
              const int64_t j = t * s.step_share() + k;
              const int64_t p = s.global_position(j);
              EXPECT_EQ(p, t * G + r + k * w);
              EXPECT_EQ(s.index(j), perm[static_cast<size_t>(p)]);
              positions.push_back(p);
            }
          }
          std::sort(positions.begin(), positions.end());
          std::vector<int64_t> block(static_cast<size_t>(G));
          std::iota(block.begin(), block.end(), t * G);
          ASSERT_EQ(positions, block) << "n=" << n << " G=" << G << " w=" << w << " t=" << t;
        }
      }
    }
  }
}

TEST(SamplerSteps, WorldDividingTheGlobalBatchIsThePadLayout) {
  for (const int64_t n : {12, 50, 97, 128}) {
    for (const int w : {1, 2, 3, 4, 6}) {
      const int64_t G = 12;
      for (int r = 0; r < w; ++r) {
        Sampler pad(n, {.seed = 2, .rank = r, .world = w});
        Sampler steps(n, {.seed = 2, .rank = r, .world = w, .global_batch = G});
        pad.set_epoch(1);
        steps.set_epoch(1);
        ASSERT_EQ(steps.step_share(), G / w);
        // pad in batches of G / w with the partial one dropped: floor(ceil(N/w) / (G/w))
        // batches, one more than the step blocks' only where N mod G > G - w.
        const int64_t pad_steps = pad.num_samples() / (G / w);
        EXPECT_EQ(steps.num_samples() / (G / w) + (n % G > G - w ? 1 : 0), pad_steps);
        for (int64_t j = 0; j < steps.num_samples(); ++j) {
          EXPECT_EQ(steps.index(j), pad.index(j));
          EXPECT_EQ(steps.global_position(j), pad.global_position(j));
        }
      }
    }
  }
}

TEST(SamplerSteps, WorldChangesMidEpochCoverEachStepOnce) {
  // 4 ranks, then 3, 3, 2, 4, ...: each step's samplers built afresh for that step's world
  // and restored to its first sample, as an elastic run rebuilds its loaders.
  const int64_t n = 203, G = 12;
  const int worlds[] = {4, 3, 3, 2, 4, 1, 5, 3, 12, 7};
  std::vector<int64_t> seen;
  const int64_t steps = n / G;
  for (int64_t t = 0; t < steps; ++t) {
    const int w = worlds[t % std::size(worlds)];
    std::vector<int64_t> block;
    for (int r = 0; r < w; ++r) {
      Sampler s(n, {.seed = 6, .rank = r, .world = w, .global_batch = G});
      s.restore({.epoch = 4, .cursor = t * s.step_share()});
      for (int64_t k = 0; k < s.step_share(); ++k) {
        const int64_t p = s.global_position(s.cursor());
        EXPECT_GE(p, t * G);
        EXPECT_LT(p, t * G + G);
        block.push_back(p);
        seen.push_back(s.next());
      }
    }
    std::sort(block.begin(), block.end());
    EXPECT_EQ(std::adjacent_find(block.begin(), block.end()), block.end()) << "step " << t;
    EXPECT_EQ(static_cast<int64_t>(block.size()), G);
  }
  // Every sample of the epoch's first steps x G positions once, none twice.
  Sampler whole(n, {.seed = 6});
  whole.set_epoch(4);
  std::vector<int64_t> want(whole.permutation().begin(), whole.permutation().begin() + steps * G);
  std::sort(want.begin(), want.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, want);
}

}  // namespace
}  // namespace braid::data
