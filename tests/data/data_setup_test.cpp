// train::make_loaders over w simulated ranks on the real Fashion-MNIST files: training
// shards step in lock step, evaluation shards cover the test split exactly once, and a
// validation split of the training data replaces the test split when asked.
#include "train/data_setup.h"

#include <gtest/gtest.h>

#include <array>

#include "core/error.h"
#include "fashion_mnist_data.h"

namespace braid::train {
namespace {

TrainConfig small_config() {
  TrainConfig c;
  c.model = nlohmann::json::parse(R"({"input": [28, 28, 1], "layers": [
      {"type": "flatten"}, {"type": "linear", "out_features": 10}]})");
  c.batch = 512;
  c.seed = 3;
  return c;
}

using Histogram = std::array<int64_t, 10>;

Histogram label_histogram(data::Loader& loader, int64_t* samples) {
  Histogram h{};
  loader.start_epoch(0);
  while (const data::Batch* b = loader.next()) {
    for (int64_t r = 0; r < b->size; ++r) ++h[static_cast<size_t>(b->targets.data<int32_t>()[r])];
    *samples += b->size;
  }
  return h;
}

Histogram sum(const Histogram& a, const Histogram& b) {
  Histogram s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

TEST(DataSetup, RanksShareTrainingEvenlyAndEvaluationExactly) {
  REQUIRE_FASHION_MNIST();
  const TrainConfig c = small_config();
  const BuiltModel model = build_model(c.model);
  int64_t one_count = 0;
  DataLoaders one = make_loaders(c, model);
  const Histogram one_hist = label_histogram(*one.eval, &one_count);
  ASSERT_EQ(one_count, 10000);
  const int world = 3;  // 10000 % 3 != 0 and 60000 % 512 != 0: uneven everywhere
  Histogram all{};
  int64_t count = 0;
  for (int r = 0; r < world; ++r) {
    DataLoaders l = make_loaders(c, model, {.rank = r, .world = world});
    EXPECT_EQ(l.train->options().sharding, data::ShardMode::pad);
    EXPECT_EQ(l.train->samples_per_epoch(), 20000);
    EXPECT_EQ(l.train->batches_per_epoch(), 20000 / 512);  // the same on every rank
    EXPECT_EQ(l.eval->options().sharding, data::ShardMode::shard);
    EXPECT_EQ(l.eval->samples_per_epoch(), r == 0 ? 3334 : 3333);
    all = sum(all, label_histogram(*l.eval, &count));
  }
  EXPECT_EQ(count, 10000);
  EXPECT_EQ(all, one_hist);
  EXPECT_THROW(make_loaders(c, model, {.rank = 3, .world = 3}), Error);
}

TEST(DataSetup, ValidationSplitOfTheTrainingData) {
  REQUIRE_FASHION_MNIST();
  const TrainConfig c = small_config();
  const BuiltModel model = build_model(c.model);
  data::SplitSpec spec{.kind = data::SplitKind::k_fold, .k = 5, .fold = 4};
  DataLoaders l = make_loaders(c, model, {.validation = spec});
  EXPECT_EQ(l.train->samples_per_epoch(), 48000);
  EXPECT_EQ(l.eval->samples_per_epoch(), 12000);
  int64_t count = 0;
  for (int r = 0; r < 2; ++r) {
    DataLoaders s = make_loaders(c, model, {.rank = r, .world = 2, .validation = spec});
    label_histogram(*s.eval, &count);
  }
  EXPECT_EQ(count, 12000);
  spec.fold = 5;
  try {
    make_loaders(c, model, {.validation = spec});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split.fold is 5"), std::string::npos) << e.what();
  }
}

TEST(DataSetup, TooFewSamplesPerRankNamesTheWorld) {
  REQUIRE_FASHION_MNIST();
  TrainConfig c = small_config();
  c.batch = 40000;
  const BuiltModel model = build_model(c.model);
  try {
    make_loaders(c, model, {.rank = 1, .world = 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("30000 per rank over 2 ranks"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace braid::train
