// Loaders continuing an epoch at a sample offset (elastic.scale_lr: the global batch is
// batch x world, so it changes with the world): ranks of one world take some steps, ranks of
// another world, with another global batch, continue the epoch from the sample where the
// first stopped. Checked by the samples' indices (IndexSource) against the epoch's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/index_source.h"
#include "data/loader.h"
#include "data/sampler.h"

namespace braid::data {
namespace {

constexpr uint64_t kSeed = 3;
constexpr int64_t kEpoch = 2;

struct Taken {
  std::vector<int64_t> positions;  // in the epoch's order
  std::vector<int64_t> indices;    // in the dataset
};

void take(const Batch& b, Taken& into) {
  for (int64_t i = 0; i < b.size; ++i) {
    into.positions.push_back(static_cast<int64_t>(b.inputs.f32()[i]));
    into.indices.push_back(b.targets.data<int32_t>()[i]);
  }
}

std::vector<std::unique_ptr<Loader>> world_of(const std::shared_ptr<const Source>& source,
                                              int world, int64_t batch) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(std::make_unique<Loader>(
        source,
        LoaderOptions{.seed = kSeed, .rank = r, .world = world, .global_batch = batch * world}));
  return ranks;
}

// `steps` steps of epoch kEpoch on `w1` ranks of `batch` each, then the rest of the epoch on
// `w2` ranks of `batch` each, restored from the first world's sample count.
Taken change_world(int64_t n, int64_t batch, int w1, int64_t steps, int w2) {
  auto source = std::make_shared<IndexSource>(n);
  Taken taken;
  auto first = world_of(source, w1, batch);
  for (auto& l : first) {
    l->start_epoch(kEpoch);
    for (int64_t k = 0; k < steps; ++k) take(*l->next(), taken);
  }
  const int64_t sample = first[0]->sample_of(first[0]->state());
  EXPECT_EQ(sample, steps * batch * w1);
  auto second = world_of(source, w2, batch);
  for (auto& l : second) {
    l->restore(l->state_at_sample(kEpoch, sample));
    bool first_batch = true;
    while (const Batch* b = l->next()) {
      if (first_batch)  // the new world's first step starts at the first sample not taken
        for (int64_t i = 0; i < b->size; ++i) {
          EXPECT_GE(b->inputs.f32()[i], sample);
          EXPECT_LT(b->inputs.f32()[i], sample + batch * w2);
        }
      first_batch = false;
      take(*b, taken);
    }
  }
  return taken;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(LoaderOffset, AWorldChangeMidEpochTakesEverySampleOnce) {
  const int64_t batch = 5;
  // 4 -> 3 after 2, 3 and 4 steps (samples 40, 60 and 80: mid-step of 15, on a step, and
  // mid-step again), 2 -> 4, 3 -> 2, 1 -> 3; each epoch's rest divides the new global batch.
  struct Case {
    int64_t n;
    int w1;
    int64_t steps;
    int w2;
  };
  for (const Case c :
       {Case{115, 4, 2, 3}, Case{120, 4, 3, 3}, Case{125, 4, 4, 3}, Case{70, 2, 1, 4},
        Case{70, 2, 3, 4}, Case{65, 3, 3, 2}, Case{70, 1, 5, 3}}) {
    SCOPED_TRACE(std::to_string(c.w1) + " ranks for " + std::to_string(c.steps) + " steps, then " +
                 std::to_string(c.w2) + " ranks, " + std::to_string(c.n) + " samples");
    ASSERT_EQ((c.n - c.steps * batch * c.w1) % (batch * c.w2), 0) << "a case with no tail";
    const Taken t = change_world(c.n, batch, c.w1, c.steps, c.w2);
    Sampler whole(c.n, {.seed = kSeed});
    whole.set_epoch(kEpoch);
    std::vector<int64_t> all(static_cast<size_t>(c.n));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted(t.positions), all);  // each position of the order once
    EXPECT_EQ(sorted(t.indices), all);    // each sample once
    for (size_t i = 0; i < t.positions.size(); ++i)
      EXPECT_EQ(t.indices[i], whole.permutation()[static_cast<size_t>(t.positions[i])]);
  }
}

TEST(LoaderOffset, TheNewWorldsLastPartialStepIsSkippedAsBefore) {
  // 97 samples: after 3 steps of 4 x 5 (60), 37 remain: two steps of 3 x 5, the last 7
  // positions skipped, as a world of 3 skips the tail of an epoch it took whole.
  const int64_t n = 97, batch = 5;
  for (const int w2 : {1, 2, 3, 4, 6}) {
    const Taken t = change_world(n, batch, 4, 3, w2);
    const int64_t end = 60 + (n - 60) / (batch * w2) * (batch * w2);
    std::vector<int64_t> want(static_cast<size_t>(end));
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted(t.positions), want) << w2 << " ranks";
    EXPECT_LT(n - end, batch * w2);
    const std::vector<int64_t> indices = sorted(t.indices);
    EXPECT_EQ(std::adjacent_find(indices.begin(), indices.end()), indices.end()) << "twice";
  }
}

TEST(LoaderOffset, AnOffsetStateResumesAndTheNextEpochStartsWhole) {
  auto source = std::make_shared<IndexSource>(97);
  Loader a(source, {.seed = kSeed, .rank = 1, .world = 3, .global_batch = 15});
  const LoaderState at = a.state_at_sample(kEpoch, 40);  // mid-step of 15: offset 10
  EXPECT_EQ(at.position, 2);
  EXPECT_EQ(at.offset, 10);
  EXPECT_EQ(a.sample_of(at), 40);
  a.restore(at);
  EXPECT_EQ(a.batches_per_epoch(), 6);  // floor(97 / 15)
  EXPECT_EQ(a.batches_in_epoch(), 5);   // floor((97 - 10) / 15): the grid shifted by 10
  a.next();
  const LoaderState mid = a.state();
  EXPECT_EQ(mid.position, 3);
  EXPECT_EQ(mid.offset, 10);
  Taken rest_a, rest_b;
  while (const Batch* b = a.next()) take(*b, rest_a);
  // A loader restored to the state mid-way gives the same remaining batches.
  Loader b(source, {.seed = kSeed, .rank = 1, .world = 3, .global_batch = 15});
  b.restore(mid);
  while (const Batch* x = b.next()) take(*x, rest_b);
  EXPECT_EQ(rest_a.positions, rest_b.positions);
  EXPECT_EQ(rest_a.indices, rest_b.indices);
  EXPECT_EQ(rest_a.positions.size(), 2u * 5);  // steps 3 and 4 of 5, this rank's 5 each
  // The next epoch has no offset.
  a.start_epoch(kEpoch + 1);
  EXPECT_EQ(a.state().offset, 0);
  EXPECT_EQ(a.batches_in_epoch(), 6);
  EXPECT_EQ(a.next()->inputs.f32()[0], 1);  // rank 1's first position of step 0
}

TEST(LoaderOffset, WithoutAGlobalBatchOnlyWholeStepsAreAccepted) {
  auto source = std::make_shared<IndexSource>(40);
  Loader l(source, {.batch = 4, .seed = kSeed, .rank = 0, .world = 2});
  EXPECT_EQ(l.state_at_sample(0, 16).position, 2);
  EXPECT_THROW(l.state_at_sample(0, 10), Error);
  EXPECT_THROW(l.restore({.epoch = 0, .position = 0, .offset = 2}), Error);
  Loader g(source, {.seed = kSeed, .rank = 0, .world = 2, .global_batch = 8});
  // Past the epoch's floor((40 - 7) / 8) = 4 steps after an offset of 7.
  EXPECT_THROW(g.restore({.epoch = 0, .position = 5, .offset = 7}), Error);
  EXPECT_THROW(g.state_at_sample(0, 41), Error);
}

}  // namespace
}  // namespace braid::data
