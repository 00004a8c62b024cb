// File-sharded .npy datasets: files go to ranks round robin, each rank's loader
// (ShardMode::local) takes only its own files' samples, every sample lands on exactly one
// rank, and every rank runs the same number of steps an epoch.
#include "data/npy_shards.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "data/npy_files.h"
#include "data/test_files.h"

namespace braid::data {
namespace {

using testing_util::npy_file_bytes;
using testing_util::raw_bytes;
using testing_util::TempDir;
using testing_util::write_file;

TEST(NpyShards, FilesGoToRanksRoundRobin) {
  const ShardPlan plan = assign_npy_shards({3, 5, 2, 4, 1}, 2);
  EXPECT_EQ(plan.files[0], (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(plan.files[1], (std::vector<size_t>{1, 3}));
  EXPECT_EQ(plan.samples, (std::vector<int64_t>{6, 9}));
  EXPECT_EQ(plan.epoch_samples, 9);
  EXPECT_EQ(plan.repeats(), 3);
  const ShardPlan even = assign_npy_shards({4, 4, 4, 4}, 4);
  EXPECT_EQ(even.repeats(), 0);
  // A rank with no file would have no data: refused, saying how many files are needed.
  try {
    assign_npy_shards({1, 2, 3}, 4);
    ADD_FAILURE() << "3 files over 4 ranks were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 4 files"), std::string::npos) << e.what();
  }
}

// `sizes[f]` samples in file f; sample k of the whole (in file order) has feature value k,
// so a batch says which samples it holds.
std::vector<std::string> write_shards(const TempDir& dir, const std::vector<int64_t>& sizes) {
  int64_t k = 0;
  for (size_t f = 0; f < sizes.size(); ++f) {
    std::vector<float> x;
    std::vector<int32_t> y;
    for (int64_t i = 0; i < sizes[f]; ++i, ++k) {
      x.push_back(static_cast<float>(k));
      x.push_back(-1.0f);
      y.push_back(static_cast<int32_t>(k % 3));
    }
    const std::string n = std::to_string(sizes[f]);
    const std::string name = "part-" + std::to_string(f);
    write_file(dir.file(name + ".x.npy"), npy_file_bytes("<f4", "(" + n + ", 2)", raw_bytes(x)));
    write_file(dir.file(name + ".y.npy"), npy_file_bytes("<i4", "(" + n + ",)", raw_bytes(y)));
  }
  return {dir.file("part-*.x.npy"), dir.file("part-*.y.npy")};
}

// Per rank: the samples of each batch of epoch `epoch`, by the value they hold.
std::vector<std::vector<int64_t>> epoch_of_ranks(const std::vector<std::string>& globs, int world,
                                                 int64_t batch, int64_t epoch) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(world));
  std::vector<int64_t> steps;
  for (int r = 0; r < world; ++r) {
    auto source = open_npy_shards({globs[0]}, {globs[1]}, r, world, {});
    LoaderOptions o;
    o.batch = batch;
    o.drop_last = true;
    o.seed = 9;
    o.rank = r;
    o.world = world;
    o.sharding = ShardMode::local;
    Loader loader(source, o);
    loader.start_epoch(epoch);
    int64_t n = 0;
    while (const Batch* b = loader.next()) {
      ++n;
      for (int64_t i = 0; i < b->size; ++i)
        out[static_cast<size_t>(r)].push_back(static_cast<int64_t>(b->inputs.f32()[2 * i]));
    }
    steps.push_back(n);
    EXPECT_EQ(n, loader.batches_per_epoch());
  }
  for (const int64_t n : steps) EXPECT_EQ(n, steps[0]) << "ranks run different numbers of steps";
  return out;
}

// 2 ranks, 5 files of 6: rank 0 holds files 0, 2, 4 (18 samples), rank 1 files 1, 3 (12),
// which it wraps to 18. Each sample is on exactly one rank, each rank reads only its files.
TEST(NpyShards, TwoRanksFiveFilesSeeEverySampleOnOneRankInEqualSteps) {
  const TempDir dir;
  const auto globs = write_shards(dir, {6, 6, 6, 6, 6});
  for (const int64_t epoch : {0, 1}) {
    const auto ranks = epoch_of_ranks(globs, 2, 3, epoch);
    std::map<int64_t, std::set<int>> where;
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(ranks[static_cast<size_t>(r)].size(), 18u) << "rank " << r;
      for (const int64_t k : ranks[static_cast<size_t>(r)]) {
        where[k].insert(r);
        EXPECT_EQ(k / 6 % 2, r) << "sample " << k << " of file " << k / 6 << " on rank " << r;
      }
    }
    ASSERT_EQ(where.size(), 30u) << "a sample was never seen in epoch " << epoch;
    for (const auto& [k, rs] : where) EXPECT_EQ(rs.size(), 1u) << "sample " << k;
    // Rank 0 takes each of its samples once; rank 1 wraps: 6 of its 12 twice.
    EXPECT_EQ(std::set<int64_t>(ranks[0].begin(), ranks[0].end()).size(), 18u);
    EXPECT_EQ(std::set<int64_t>(ranks[1].begin(), ranks[1].end()).size(), 12u);
  }
  // Shuffled by epoch, and the same again for the same (seed, epoch).
  EXPECT_NE(epoch_of_ranks(globs, 2, 3, 0)[0], epoch_of_ranks(globs, 2, 3, 1)[0]);
  EXPECT_EQ(epoch_of_ranks(globs, 2, 3, 1), epoch_of_ranks(globs, 2, 3, 1));
}

// Four files of equal size over 2 ranks: every sample exactly once an epoch.
TEST(NpyShards, BalancedShardsSeeEverySampleExactlyOnce) {
  const TempDir dir;
  const auto globs = write_shards(dir, {5, 5, 5, 5});
  const auto ranks = epoch_of_ranks(globs, 2, 5, 0);
  std::multiset<int64_t> all(ranks[0].begin(), ranks[0].end());
  all.insert(ranks[1].begin(), ranks[1].end());
  ASSERT_EQ(all.size(), 20u);
  for (int64_t k = 0; k < 20; ++k) EXPECT_EQ(all.count(k), 1u) << "sample " << k;
}

TEST(NpyShards, GlobsExpandInNameOrderAndMustMatch) {
  const TempDir dir;
  write_shards(dir, {1, 1, 1});
  const auto files = expand_npy_shards({dir.file("part-*.y.npy")}, "npy_shard_labels");
  EXPECT_EQ(files, (std::vector<std::string>{dir.file("part-0.y.npy"), dir.file("part-1.y.npy"),
                                             dir.file("part-2.y.npy")}));
  EXPECT_THROW(expand_npy_shards({dir.file("nothing-*.npy")}, "npy_shards"), IoError);
  // Three features files, two labels files.
  EXPECT_THROW(open_npy_shards({dir.file("part-*.x.npy")},
                               {dir.file("part-0.y.npy"), dir.file("part-1.y.npy")}, 0, 1, {}),
               IoError);
}

// A shard of another dtype is named, even when it belongs to another rank.
TEST(NpyShards, AShardOfAnotherKindIsNamedOnEveryRank) {
  const TempDir dir;
  const auto globs = write_shards(dir, {2, 2, 2});
  write_file(dir.file("part-1.x.npy"),
             npy_file_bytes("<f8", "(2, 2)", raw_bytes(std::vector<double>(4, 0.0))));
  for (int r = 0; r < 2; ++r) {
    try {
      open_npy_shards({globs[0]}, {globs[1]}, r, 2, {});
      ADD_FAILURE() << "rank " << r << " accepted an f8 shard among f4 ones";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("part-1.x.npy")), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace braid::data
