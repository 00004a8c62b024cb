// Evaluation sharded over simulated ranks: w loaders in ShardMode::shard read every sample
// of the split exactly once between them, however uneven the shards (world > N included),
// and the summed tallies equal one process's.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "data/eval_tally.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "data/sources.h"
#include "fashion_mnist_data.h"

namespace braid::data {
namespace {

// Row i holds (i) and label i % 10: a batch tells which samples it read.
std::shared_ptr<const ArraySource> numbered_rows(int64_t n) {
  auto d = std::make_shared<ArrayDataset>();
  d->features = Tensor::empty({n, 1}, DType::f32, MemCategory::data);
  d->labels = Tensor::empty({n}, DType::i32, MemCategory::data);
  d->num_classes = 10;
  for (int64_t i = 0; i < n; ++i) {
    d->features.f32()[i] = static_cast<float>(i);
    d->labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  }
  return std::make_shared<ArraySource>(d);
}

TEST(EvalSharding, EverySampleExactlyOnceForManyWorlds) {
  for (const int64_t n : {0, 1, 2, 5, 9, 10, 64, 101}) {
    for (const int world : {1, 2, 3, 4, 7, 8, 13, 128}) {
      for (const int64_t batch : {1, 4, 64}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " world=" << world << " batch=" << batch);
        const auto source = numbered_rows(n);
        std::vector<int> seen(static_cast<size_t>(n), 0);
        std::vector<EvalTally> tallies;
        for (int r = 0; r < world; ++r) {
          Loader loader(source, sharded_eval_options(batch, r, world));
          EXPECT_EQ(loader.samples_per_epoch(), r < n ? (n - r + world - 1) / world : 0);
          loader.start_epoch(0);
          EvalTally t;
          while (const Batch* b = loader.next()) {
            for (int64_t j = 0; j < b->size; ++j) {
              const auto i = static_cast<int64_t>(b->inputs.f32()[j]);
              ASSERT_EQ(i % world, r) << "rank " << r << " read another rank's sample";
              ++seen[static_cast<size_t>(i)];
              t.add_batch(0.0, 0, 1);
            }
          }
          EXPECT_EQ(loader.next(), nullptr);  // an empty or finished shard ends at once
          tallies.push_back(t);
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << i;
        EXPECT_EQ(sum_in_rank_order(tallies).count, n);
      }
    }
  }
}

// A fixed "model" with no parameters: predicts class (sum of the normalised pixels) mod
// 10 and scores loss = |sum| / pixels. Enough to make correct counts and losses depend on
// which samples a rank saw.
void tally_batch(const Batch& b, EvalTally& t) {
  const int64_t pixels = b.inputs.numel() / std::max<int64_t>(1, b.size);
  for (int64_t r = 0; r < b.size; ++r) {
    double sum = 0;
    for (int64_t p = 0; p < pixels; ++p) sum += b.inputs.f32()[r * pixels + p];
    const auto predicted = static_cast<int32_t>(static_cast<int64_t>(std::fabs(sum)) % 10);
    t.add_batch(std::fabs(sum) / static_cast<double>(pixels),
                predicted == b.targets.data<int32_t>()[r] ? 1 : 0, 1);
  }
}

EvalTally evaluate_rank(const std::shared_ptr<const Source>& source, int64_t batch, int rank,
                        int world) {
  Loader loader(source, sharded_eval_options(batch, rank, world));
  loader.start_epoch(0);
  EvalTally t;
  while (const Batch* b = loader.next()) tally_batch(*b, t);
  return t;
}

std::shared_ptr<const Source> test_split() {
  if (braid::testing::have_fashion_mnist())
    return std::make_shared<ImageSource>(
        std::make_shared<ImageDataset>(load_fashion_mnist(kFashionMnistDir, Split::test)));
  // Synthetic stand-in of an uneven size, so the test still runs without the package.
  auto d = std::make_shared<ImageDataset>(ImageDataset::allocate(1003, 6, 6, 1, 10));
  Rng rng(5);
  for (int64_t i = 0; i < d->n; ++i) {
    for (int64_t p = 0; p < d->image_bytes(); ++p)
      d->mutable_image(i)[p] = static_cast<uint8_t>(rng.below(256));
    d->labels.data<int32_t>()[i] = static_cast<int32_t>(rng.below(10));
  }
  return std::make_shared<ImageSource>(d);
}

TEST(EvalSharding, RanksReduceToTheOneProcessResultOnTheTestSet) {
  const auto source = test_split();
  const int64_t n = source->size();
  const EvalTally one = evaluate_rank(source, 256, 0, 1);
  ASSERT_EQ(one.count, n);
  for (const int world : {2, 3, 7}) {
    SCOPED_TRACE(::testing::Message() << "world=" << world);
    std::vector<EvalTally> tallies;
    for (int r = 0; r < world; ++r) tallies.push_back(evaluate_rank(source, 256, r, world));
    // The allreduce the ranks would run: a sum of the packed tallies, the same on each.
    std::array<double, EvalTally::kPacked> summed{};
    for (const EvalTally& t : tallies) {
      const auto p = t.pack();
      for (size_t k = 0; k < summed.size(); ++k) summed[k] += p[k];
    }
    const EvalTally all = EvalTally::unpack(summed);
    EXPECT_EQ(all.count, n);  // no sample counted twice, none missed
    EXPECT_EQ(all.correct, one.correct);
    EXPECT_EQ(all.accuracy(), one.accuracy());
    EXPECT_NEAR(all.loss(), one.loss(), 1e-9 * std::fabs(one.loss()));  // summation order only
    EXPECT_EQ(sum_in_rank_order(tallies).correct, one.correct);
  }
}

TEST(EvalSharding, PaddedEvaluationWouldCountTwice) {
  // Why evaluation does not use the training mode: pad repeats the head when N % w != 0.
  const auto source = numbered_rows(10);
  int64_t count = 0;
  for (int r = 0; r < 4; ++r) {
    LoaderOptions o = sharded_eval_options(3, r, 4);
    o.sharding = ShardMode::pad;
    Loader loader(source, o);
    count += loader.samples_per_epoch();
  }
  EXPECT_EQ(count, 12);
}

using Packed = std::array<double, EvalTally::kPacked>;

TEST(EvalTally, UnpackRefusesWhatIsNotACount) {
  EXPECT_THROW(EvalTally::unpack(Packed{0.0, 1.5, 3.0}), Error);
  EXPECT_THROW(EvalTally::unpack(Packed{0.0, 4.0, 3.0}), Error);
  EXPECT_THROW(EvalTally::unpack(Packed{0.0, -1.0, 3.0}), Error);
  EXPECT_THROW(EvalTally::unpack(Packed{0, 0, 0, 0, 0, 2.5, 4.0}), Error);
  EXPECT_THROW(EvalTally::unpack(Packed{0, 0, 0, 0, 0, 5.0, 4.0}), Error);
  const EvalTally t = EvalTally::unpack(Packed{6.0, 2.0, 3.0});
  EXPECT_EQ(t.correct, 2);
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.loss(), 2.0);
  EXPECT_EQ(EvalTally{}.accuracy(), 0.0);
}

// Regression: the squared and absolute errors of every element, worked out by hand.
TEST(EvalTally, ErrorsOverEveryElementByHand) {
  EvalTally t;
  const float pred[] = {1, 2, 3, 4, -1};
  const float target[] = {0, 2, 5, 3.5f, 1};
  t.add_errors(pred, target, 3);          // differences 1, 0, -2
  t.add_errors(pred + 3, target + 3, 2);  // 0.5, -2
  EXPECT_EQ(t.elements, 5);
  EXPECT_DOUBLE_EQ(t.mse(), (1 + 0 + 4 + 0.25 + 4) / 5.0);
  EXPECT_DOUBLE_EQ(t.mae(), (1 + 0 + 2 + 0.5 + 2) / 5.0);
  // Multi-label: a logit > 0 says 1; targets >= 0.5 are 1. Hits: rows 2, 3, 4 (-1 vs 1 misses;
  // 1 vs 0 misses).
  EXPECT_DOUBLE_EQ(t.label_accuracy(), 3.0 / 5.0);
  // Through the allreduce's buffer and back, nothing is lost.
  const EvalTally back = EvalTally::unpack(t.pack());
  EXPECT_EQ(back.mse(), t.mse());
  EXPECT_EQ(back.mae(), t.mae());
  EXPECT_EQ(back.label_hits, 3);
  EXPECT_EQ(EvalTally{}.mse(), 0.0);
}

// Numeric targets [N, 2] read by w sharded loaders, scored by a fixed "model" (pred = the
// feature): the summed tallies give one process's MSE and MAE over all 2N elements.
TEST(EvalSharding, RegressionErrorsReduceToTheOneProcessResult) {
  constexpr int64_t n = 103;
  auto d = std::make_shared<ArrayDataset>();
  d->features = Tensor::empty({n, 2}, DType::f32, MemCategory::data);
  d->targets = Tensor::empty({n, 2}, DType::f32, MemCategory::data);
  d->num_classes = 2;
  Rng rng(9);
  for (int64_t i = 0; i < 2 * n; ++i) {
    d->features.f32()[i] = rng.normal();
    d->targets.f32()[i] = rng.normal() * 3;
  }
  const auto source = std::make_shared<ArraySource>(d);
  auto evaluate = [&](int rank, int world) {
    Loader loader(source, sharded_eval_options(8, rank, world));
    loader.start_epoch(0);
    EvalTally t;
    while (const Batch* b = loader.next())
      t.add_errors(b->inputs.f32(), b->targets.f32(), b->targets.numel());
    return t;
  };
  const EvalTally one = evaluate(0, 1);
  double sq = 0, ab = 0;  // the reference, straight from the arrays
  for (int64_t i = 0; i < 2 * n; ++i) {
    const double e = static_cast<double>(d->features.f32()[i]) - d->targets.f32()[i];
    sq += e * e;
    ab += std::fabs(e);
  }
  EXPECT_NEAR(one.mse(), sq / (2 * n), 1e-12 * sq);
  EXPECT_NEAR(one.mae(), ab / (2 * n), 1e-12 * ab);
  for (const int world : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "world=" << world);
    Packed summed{};
    for (int r = 0; r < world; ++r) {
      const Packed p = evaluate(r, world).pack();
      for (size_t k = 0; k < summed.size(); ++k) summed[k] += p[k];
    }
    const EvalTally all = EvalTally::unpack(summed);
    EXPECT_EQ(all.elements, 2 * n);
    EXPECT_NEAR(all.mse(), one.mse(), 1e-12 * one.mse());  // summation order only
    EXPECT_NEAR(all.mae(), one.mae(), 1e-12 * one.mae());
    EXPECT_EQ(all.label_hits, one.label_hits);
  }
}

}  // namespace
}  // namespace braid::data
