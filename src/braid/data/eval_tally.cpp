// Packing an EvalTally for a collective.
#include "data/eval_tally.h"

#include <cmath>

#include "core/error.h"

namespace braid::data {
namespace {

constexpr double kMaxExact = 9007199254740992.0;  // 2^53

int64_t whole(double v, const char* what) {
  BRAID_CHECK(std::isfinite(v) && v >= 0 && v <= kMaxExact && v == std::floor(v),
              "reduced evaluation ", what, " is ", v,
              "; expected a whole count (did the ranks reduce different buffers?)");
  return static_cast<int64_t>(v);
}

}  // namespace

void EvalTally::add_errors(const float* pred, const float* target, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
    squared_error_sum += d * d;
    absolute_error_sum += std::abs(d);
    label_hits += (pred[i] > 0) == (target[i] >= 0.5f) ? 1 : 0;
  }
  elements += n;
}

std::array<double, EvalTally::kPacked> EvalTally::pack() const {
  BRAID_CHECK(
      count >= 0 && correct >= 0 && correct <= count && static_cast<double>(count) <= kMaxExact,
      "evaluation tally of ", correct, " correct out of ", count, " cannot be reduced");
  BRAID_CHECK(elements >= 0 && label_hits >= 0 && label_hits <= elements &&
                  static_cast<double>(elements) <= kMaxExact,
              "evaluation tally of ", label_hits, " label hits out of ", elements,
              " elements cannot be reduced");
  return {loss_sum,
          static_cast<double>(correct),
          static_cast<double>(count),
          squared_error_sum,
          absolute_error_sum,
          static_cast<double>(label_hits),
          static_cast<double>(elements)};
}

EvalTally EvalTally::unpack(std::span<const double, kPacked> summed) {
  EvalTally t;
  t.loss_sum = summed[0];
  t.correct = whole(summed[1], "correct count");
  t.count = whole(summed[2], "sample count");
  BRAID_CHECK(t.correct <= t.count, "reduced evaluation has ", t.correct, " correct out of ",
              t.count, " samples");
  t.squared_error_sum = summed[3];
  t.absolute_error_sum = summed[4];
  t.label_hits = whole(summed[5], "label hit count");
  t.elements = whole(summed[6], "element count");
  BRAID_CHECK(t.label_hits <= t.elements, "reduced evaluation has ", t.label_hits,
              " label hits out of ", t.elements, " elements");
  return t;
}

EvalTally sum_in_rank_order(std::span<const EvalTally> per_rank) {
  EvalTally total;
  for (const EvalTally& t : per_rank) total += t;
  return total;
}

}  // namespace braid::data
