// Index splits. Each builder checks its inputs against N before allocating, so a spec
// read from a config can never size a vector by an unchecked value.
#include "data/splits.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace braid::data {
namespace {

void check_n(int64_t n) { BRAID_CHECK(n >= 0, "dataset size must be >= 0, got ", n); }

void check_fraction(double f) {
  BRAID_CHECK(std::isfinite(f) && f > 0.0 && f < 1.0, "split.validation_fraction is ", f,
              "; it must be in (0, 1), e.g. 0.1 to validate on a tenth of the data");
}

// round(n * f) validation samples; both sides must keep at least one.
int64_t validation_count(int64_t n, double f) {
  check_fraction(f);
  const auto v = static_cast<int64_t>(std::llround(static_cast<double>(n) * f));
  BRAID_CHECK(v >= 1, "split.validation_fraction ", f, " of ", n,
              " samples leaves no validation sample; raise it above ",
              n > 0 ? 0.5 / static_cast<double>(n) : 1.0);
  return v;
}

void check_sides(const IndexSplit& s, int64_t n, std::string_view what) {
  BRAID_CHECK(!s.train.empty(), what, " leaves none of the ", n,
              " samples for training; validate on fewer");
  BRAID_CHECK(!s.validation.empty(), what, " leaves none of the ", n, " samples for validation");
}

}  // namespace

std::string_view split_kind_name(SplitKind k) {
  switch (k) {
    case SplitKind::none:
      return "none";
    case SplitKind::range:
      return "range";
    case SplitKind::k_fold:
      return "k_fold";
    case SplitKind::ordered:
      return "ordered";
  }
  return "?";
}

SplitKind parse_split_kind(std::string_view text) {
  for (const SplitKind k :
       {SplitKind::none, SplitKind::range, SplitKind::k_fold, SplitKind::ordered})
    if (text == split_kind_name(k)) return k;
  BRAID_THROW(Error, "split.kind is '", text,
              "'; use 'none', 'range' (a contiguous validation block), 'k_fold' or 'ordered' "
              "(a time split: validate on the later part)");
}

std::vector<int64_t> index_range(int64_t begin, int64_t end) {
  BRAID_CHECK(0 <= begin && begin <= end, "index range [", begin, ", ", end,
              ") needs 0 <= begin <= end");
  std::vector<int64_t> out(static_cast<size_t>(end - begin));
  std::iota(out.begin(), out.end(), begin);
  return out;
}

IndexSplit range_split(int64_t n, int64_t begin, int64_t end) {
  check_n(n);
  BRAID_CHECK(begin >= 0 && begin < n, "split.begin is ", begin, "; it must be in [0, ", n,
              ") for a dataset of ", n, " samples");
  BRAID_CHECK(end > begin && end <= n, "split.end is ", end,
              "; it must be in (split.begin = ", begin, ", ", n, "] for a dataset of ", n,
              " samples");
  IndexSplit s;
  s.validation = index_range(begin, end);
  s.train = index_range(0, begin);
  for (int64_t i = end; i < n; ++i) s.train.push_back(i);
  check_sides(s, n,
              "split.begin/split.end [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  return s;
}

IndexSplit fraction_split(int64_t n, double validation_fraction) {
  check_n(n);
  const int64_t v = validation_count(n, validation_fraction);
  IndexSplit s;
  s.train = index_range(0, n - v);
  s.validation = index_range(n - v, n);
  check_sides(s, n, "split.validation_fraction " + std::to_string(validation_fraction));
  return s;
}

IndexSplit k_fold_split(int64_t n, int k, int fold, bool shuffle, uint64_t seed) {
  check_n(n);
  BRAID_CHECK(k >= 2, "split.k is ", k, "; k-fold needs k >= 2 folds (5 or 10 are usual)");
  BRAID_CHECK(fold >= 0 && fold < k, "split.fold is ", fold, "; with split.k = ", k,
              " it must be in [0, ", k - 1, "]");
  BRAID_CHECK(n >= k, "split.k is ", k, " but the dataset has only ", n,
              " samples; every fold needs one: lower split.k to at most ", n);
  std::vector<int64_t> order = index_range(0, n);
  if (shuffle) {
    Rng rng(seed, kSplitStream);
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)],
                order[static_cast<size_t>(rng.below(static_cast<uint64_t>(i + 1)))]);
  }
  // Fold f covers [start(f), start(f + 1)): the first n % k folds hold one more.
  const int64_t base = n / k, extra = n % k;
  auto start = [&](int64_t f) { return f * base + std::min(f, extra); };
  const auto b = static_cast<size_t>(start(fold)), e = static_cast<size_t>(start(fold + 1));
  IndexSplit s;
  s.validation.assign(order.begin() + static_cast<ptrdiff_t>(b),
                      order.begin() + static_cast<ptrdiff_t>(e));
  s.train.reserve(order.size() - s.validation.size());
  s.train.insert(s.train.end(), order.begin(), order.begin() + static_cast<ptrdiff_t>(b));
  s.train.insert(s.train.end(), order.begin() + static_cast<ptrdiff_t>(e), order.end());
  return s;
}

IndexSplit ordered_split(int64_t n, double validation_fraction, int64_t gap) {
  check_n(n);
  BRAID_CHECK(gap >= 0, "split.gap is ", gap,
              "; it must be >= 0 (samples left out between "
              "training and validation)");
  const int64_t v = validation_count(n, validation_fraction);
  BRAID_CHECK(gap < n - v, "split.gap is ", gap, " but only ", n - v,
              " samples precede the validation part (split.validation_fraction ",
              validation_fraction, " of ", n,
              "); no training sample would be left: lower split.gap");
  IndexSplit s;
  s.train = index_range(0, n - v - gap);
  s.validation = index_range(n - v, n);
  return s;
}

void validate(const SplitSpec& spec) {
  switch (spec.kind) {
    case SplitKind::none:
      return;
    case SplitKind::range:
      if (spec.end < 0) return check_fraction(spec.validation_fraction);
      BRAID_CHECK(spec.begin >= 0 && spec.end > spec.begin, "split.begin/split.end are [",
                  spec.begin, ", ", spec.end, "); they must be 0 <= begin < end");
      return;
    case SplitKind::k_fold:
      BRAID_CHECK(spec.k >= 2, "split.k is ", spec.k,
                  "; k-fold needs k >= 2 folds (5 or 10 are usual)");
      BRAID_CHECK(spec.fold >= 0 && spec.fold < spec.k, "split.fold is ", spec.fold,
                  "; with split.k = ", spec.k, " it must be in [0, ", spec.k - 1, "]");
      return;
    case SplitKind::ordered:
      check_fraction(spec.validation_fraction);
      BRAID_CHECK(spec.gap >= 0, "split.gap is ", spec.gap, "; it must be >= 0");
      return;
  }
}

IndexSplit make_split(int64_t n, const SplitSpec& spec) {
  validate(spec);
  switch (spec.kind) {
    case SplitKind::none:
      check_n(n);
      return {index_range(0, n), {}};
    case SplitKind::range:
      return spec.end < 0 ? fraction_split(n, spec.validation_fraction)
                          : range_split(n, spec.begin, spec.end);
    case SplitKind::k_fold:
      return k_fold_split(n, spec.k, spec.fold, spec.shuffle, spec.seed);
    case SplitKind::ordered:
      return ordered_split(n, spec.validation_fraction, spec.gap);
  }
  return {};
}

}  // namespace braid::data
