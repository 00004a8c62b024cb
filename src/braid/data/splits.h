// Train/validation splits of a dataset's index set [0, N), as a config describes them, and
// a Source restricted to a list of indices (subset.h) to train or validate on one side.
//
// Three kinds, all pure functions of (N, spec), so every rank computes the same split:
//   range    validation is the contiguous block [begin, end) (or, given a fraction f, the
//            last round(N * f) indices); training is everything else, in index order.
//   k_fold   the index order (optionally shuffled once by Rng(seed, kSplitStream)) is cut
//            into k contiguous folds, the first N % k of them one longer (sklearn's KFold);
//            fold i is validation, the other folds, in that order, are training. Over
//            i = 0..k-1 each index is validated exactly once.
//   ordered  a time split: training is [0, t), validation [t + gap, N) with
//            N - t - gap = round(N * f); never shuffled, so every training index precedes
//            every validation index, and `gap` indices between them are left out (so
//            windows that straddle the boundary do not leak the future).
// A split is checked against N when made: a side left empty, k < 2, a fold out of range or
// a fraction outside (0, 1) is an error naming the key (split.*) and its value.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace braid::data {

enum class SplitKind : uint8_t { none, range, k_fold, ordered };
std::string_view split_kind_name(SplitKind k);
// "none", "range", "k_fold" or "ordered"; anything else is an error naming split.kind.
SplitKind parse_split_kind(std::string_view text);

// The Rng stream a k-fold shuffle draws from: apart from the sampler's (the epoch) and the
// per-sample streams (kSampleStreamBit | epoch), so a split seeded like the run is not the
// first epoch's order.
inline constexpr uint64_t kSplitStream = 1ull << 62;

// Config keys, as errors name them: split.kind, split.validation_fraction, split.begin,
// split.end, split.k, split.fold, split.shuffle, split.seed, split.gap.
struct SplitSpec {
  SplitKind kind = SplitKind::none;
  // range (when end < 0) and ordered: the share of the N samples that validates.
  double validation_fraction = 0.1;
  int64_t begin = 0, end = -1;  // range: validation [begin, end) when end >= 0
  int k = 5;                    // k_fold: number of folds, >= 2
  int fold = 0;                 // k_fold: which fold validates, in [0, k)
  bool shuffle = false;         // k_fold: shuffle the indices once before folding
  uint64_t seed = 0;            // k_fold: the shuffle's seed
  int64_t gap = 0;              // ordered: indices left out between training and validation
};

struct IndexSplit {
  std::vector<int64_t> train, validation;
};

// Checks the spec on its own (kind-specific keys only); make_split also checks it against N.
void validate(const SplitSpec& spec);

// The split of [0, n) the spec describes. kind none: everything trains, nothing validates.
IndexSplit make_split(int64_t n, const SplitSpec& spec);

// The building blocks, for callers that do not go through a SplitSpec.
IndexSplit range_split(int64_t n, int64_t begin, int64_t end);
IndexSplit fraction_split(int64_t n, double validation_fraction);
IndexSplit k_fold_split(int64_t n, int k, int fold, bool shuffle = false, uint64_t seed = 0);
IndexSplit ordered_split(int64_t n, double validation_fraction, int64_t gap = 0);

// [begin, end) as a list.
std::vector<int64_t> index_range(int64_t begin, int64_t end);

}  // namespace braid::data
