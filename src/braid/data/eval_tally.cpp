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

std::array<double, 3> EvalTally::pack() const {
  BRAID_CHECK(
      count >= 0 && correct >= 0 && correct <= count && static_cast<double>(count) <= kMaxExact,
      "evaluation tally of ", correct, " correct out of ", count, " cannot be reduced");
  return {loss_sum, static_cast<double>(correct), static_cast<double>(count)};
}

EvalTally EvalTally::unpack(std::span<const double, 3> summed) {
  EvalTally t;
  t.loss_sum = summed[0];
  t.correct = whole(summed[1], "correct count");
  t.count = whole(summed[2], "sample count");
  BRAID_CHECK(t.correct <= t.count, "reduced evaluation has ", t.correct, " correct out of ",
              t.count, " samples");
  return t;
}

EvalTally sum_in_rank_order(std::span<const EvalTally> per_rank) {
  EvalTally total;
  for (const EvalTally& t : per_rank) total += t;
  return total;
}

}  // namespace braid::data
