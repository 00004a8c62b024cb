#include "data/splits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "data/loader.h"
#include "data/sources.h"
#include "data/subset.h"

namespace braid::data {
namespace {

std::vector<int64_t> sorted_union(const IndexSplit& s) {
  std::vector<int64_t> all = s.train;
  all.insert(all.end(), s.validation.begin(), s.validation.end());
  std::sort(all.begin(), all.end());
  return all;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Splits, KFoldPartitionsTheIndexSet) {
  for (const bool shuffle : {false, true}) {
    for (const int64_t n : {2, 5, 10, 11, 97}) {
      for (const int k : {2, 3, 5, 10}) {
        if (k > n) continue;
        SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k << " shuffle=" << shuffle);
        std::vector<int> validated(static_cast<size_t>(n), 0);
        for (int fold = 0; fold < k; ++fold) {
          const IndexSplit s = k_fold_split(n, k, fold, shuffle, 7);
          // Each fold splits [0, n): disjoint sides that together cover it.
          ASSERT_EQ(sorted_union(s), index_range(0, n));
          const int64_t size = static_cast<int64_t>(s.validation.size());
          EXPECT_TRUE(size == n / k || size == n / k + 1);
          EXPECT_EQ(size, n / k + (fold < n % k ? 1 : 0));
          for (const int64_t i : s.validation) ++validated[static_cast<size_t>(i)];
        }
        // Over all folds each index validates exactly once.
        EXPECT_TRUE(std::all_of(validated.begin(), validated.end(), [](int c) { return c == 1; }));
      }
    }
  }
}

TEST(Splits, KFoldShuffleIsSeededAndUnshuffledIsContiguous) {
  EXPECT_EQ(k_fold_split(10, 5, 1).validation, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(k_fold_split(10, 5, 1).train, (std::vector<int64_t>{0, 1, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(k_fold_split(11, 3, 0).validation, index_range(0, 4));
  EXPECT_EQ(k_fold_split(11, 3, 2).validation, index_range(8, 11));
  const IndexSplit a = k_fold_split(100, 4, 2, true, 1), b = k_fold_split(100, 4, 2, true, 1);
  const IndexSplit c = k_fold_split(100, 4, 2, true, 2);
  EXPECT_EQ(a.validation, b.validation);
  EXPECT_EQ(a.train, b.train);
  EXPECT_NE(a.validation, c.validation);
  EXPECT_NE(a.validation, k_fold_split(100, 4, 2).validation);
}

TEST(Splits, OrderedKeepsOrderAndTrainPrecedesValidation) {
  for (const int64_t n : {2, 10, 101, 1000}) {
    for (const double f : {0.1, 0.25, 0.5}) {
      for (const int64_t gap : {0, 1, 3}) {
        if (n - std::llround(static_cast<double>(n) * f) - gap < 1 ||
            std::llround(static_cast<double>(n) * f) < 1)
          continue;
        SCOPED_TRACE(testing::Message() << "n=" << n << " f=" << f << " gap=" << gap);
        const IndexSplit s = ordered_split(n, f, gap);
        ASSERT_FALSE(s.train.empty());
        ASSERT_FALSE(s.validation.empty());
        EXPECT_TRUE(std::is_sorted(s.train.begin(), s.train.end()));
        EXPECT_TRUE(std::is_sorted(s.validation.begin(), s.validation.end()));
        EXPECT_LT(s.train.back(), s.validation.front());
        EXPECT_EQ(s.validation.front() - s.train.back() - 1, gap);  // the gap is left out
        EXPECT_EQ(s.train.front(), 0);
        EXPECT_EQ(s.validation.back(), n - 1);
        EXPECT_EQ(static_cast<int64_t>(s.validation.size()),
                  std::llround(static_cast<double>(n) * f));
        EXPECT_EQ(static_cast<int64_t>(s.train.size() + s.validation.size()) + gap, n);
      }
    }
  }
}

TEST(Splits, ContiguousRanges) {
  const IndexSplit tail = fraction_split(100, 0.1);
  EXPECT_EQ(tail.train, index_range(0, 90));
  EXPECT_EQ(tail.validation, index_range(90, 100));
  const IndexSplit mid = range_split(10, 3, 6);
  EXPECT_EQ(mid.validation, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(mid.train, (std::vector<int64_t>{0, 1, 2, 6, 7, 8, 9}));
  EXPECT_EQ(make_split(10, {.kind = SplitKind::range, .begin = 3, .end = 6}).validation,
            mid.validation);
  EXPECT_EQ(make_split(100, {.kind = SplitKind::range}).validation, tail.validation);
  const IndexSplit none = make_split(4, {});
  EXPECT_EQ(none.train, index_range(0, 4));
  EXPECT_TRUE(none.validation.empty());
}

TEST(Splits, ErrorsNameTheKeyAndValue) {
  auto has = [](const std::string& e, const char* want) {
    return e.find(want) != std::string::npos;
  };
  EXPECT_TRUE(has(error_of([] { k_fold_split(10, 1, 0); }), "split.k is 1"));
  EXPECT_TRUE(has(error_of([] { k_fold_split(10, 5, 5); }), "split.fold is 5"));
  EXPECT_TRUE(has(error_of([] { k_fold_split(10, 5, -1); }), "split.fold is -1"));
  EXPECT_TRUE(has(error_of([] { k_fold_split(3, 5, 0); }), "only 3 samples"));
  for (const double f : {0.0, 1.0, -0.5, 1.5}) {
    const std::string e = error_of([&] { ordered_split(100, f); });
    EXPECT_TRUE(has(e, "split.validation_fraction is")) << e;
    EXPECT_TRUE(has(error_of([&] { fraction_split(100, f); }), "(0, 1)"));
  }
  EXPECT_TRUE(has(error_of([] { fraction_split(10, 0.01); }), "no validation sample"));
  EXPECT_TRUE(has(error_of([] { fraction_split(10, 0.99); }), "for training"));
  EXPECT_TRUE(has(error_of([] { ordered_split(10, 0.5, 5); }), "split.gap is 5"));
  EXPECT_TRUE(has(error_of([] { ordered_split(10, 0.5, -1); }), "split.gap is -1"));
  EXPECT_TRUE(has(error_of([] { range_split(10, 0, 10); }), "for training"));
  EXPECT_TRUE(has(error_of([] { range_split(10, 4, 4); }), "split.end is 4"));
  EXPECT_TRUE(has(error_of([] { range_split(10, 11, 12); }), "split.begin is 11"));
  EXPECT_TRUE(has(error_of([] { validate({.kind = SplitKind::k_fold, .k = 1}); }), "split.k is 1"));
  EXPECT_TRUE(has(error_of([] { parse_split_kind("kfold"); }), "split.kind is 'kfold'"));
  EXPECT_EQ(parse_split_kind("k_fold"), SplitKind::k_fold);
  EXPECT_EQ(parse_split_kind("ordered"), SplitKind::ordered);
}

std::shared_ptr<const ArraySource> numbered_rows(int64_t n) {
  auto d = std::make_shared<ArrayDataset>();
  d->features = Tensor::empty({n, 2}, DType::f32, MemCategory::data);
  d->labels = Tensor::empty({n}, DType::i32, MemCategory::data);
  d->num_classes = static_cast<int32_t>(n);
  for (int64_t i = 0; i < n; ++i) {
    d->features.f32()[2 * i] = static_cast<float>(i);
    d->features.f32()[2 * i + 1] = -static_cast<float>(i);
    d->labels.data<int32_t>()[i] = static_cast<int32_t>(i);
  }
  return std::make_shared<ArraySource>(d);
}

TEST(SubsetSource, ReadsTheBaseRowsItNames) {
  const auto base = numbered_rows(500);
  // More indices than one fill chunk, so the row slices are exercised too.
  std::vector<int64_t> picks;
  for (int64_t i = 499; i >= 0; i -= 2) picks.push_back(i);
  auto subset = std::make_shared<SubsetSource>(base, picks);
  EXPECT_EQ(subset->size(), 250);
  EXPECT_EQ(subset->input_shape(), Shape{2});
  Loader loader(subset, {.batch = 200, .shuffle = true, .seed = 4});
  loader.start_epoch(0);
  std::vector<int> seen(500, 0);
  while (const Batch* b = loader.next()) {
    for (int64_t r = 0; r < b->size; ++r) {
      const int32_t label = b->targets.data<int32_t>()[r];
      EXPECT_EQ(b->inputs.f32()[2 * r], static_cast<float>(label));
      EXPECT_EQ(b->inputs.f32()[2 * r + 1], -static_cast<float>(label));
      ++seen[static_cast<size_t>(label)];
    }
  }
  for (int64_t i = 0; i < 500; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i % 2) << i;
  EXPECT_THROW(SubsetSource(base, {0, 500}), Error);
  EXPECT_THROW(SubsetSource(base, {-1}), Error);
}

TEST(SubsetSource, SplitSidesTogetherAreTheBase) {
  const auto base = numbered_rows(40);
  const IndexSplit s = k_fold_split(40, 4, 3, true, 9);
  std::vector<int32_t> labels;
  for (const auto& side : {s.train, s.validation}) {
    Loader loader(std::make_shared<SubsetSource>(base, side), {.batch = 7, .shuffle = false});
    loader.start_epoch(0);
    size_t j = 0;
    while (const Batch* b = loader.next())
      for (int64_t r = 0; r < b->size; ++r, ++j) {
        EXPECT_EQ(b->targets.data<int32_t>()[r], side[j]);  // unshuffled: the split's order
        labels.push_back(b->targets.data<int32_t>()[r]);
      }
  }
  std::sort(labels.begin(), labels.end());
  for (int32_t i = 0; i < 40; ++i) EXPECT_EQ(labels[static_cast<size_t>(i)], i);
}

}  // namespace
}  // namespace braid::data
