#include "parallel/partition_tuner.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace braid::parallel {
namespace {

std::string size_name(size_t bytes) {
  std::ostringstream out;
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0)
    out << (bytes >> 20) << " MiB";
  else if (bytes >= (size_t{1} << 10))
    out << (bytes >> 10) << " KiB";
  else
    out << bytes << " B";
  return out.str();
}

}  // namespace

PartitionTuner::PartitionTuner(size_t largest_bucket_bytes, int settle, int measured)
    : settle_(settle), measured_(measured) {
  BRAID_CHECK(settle >= 0 && measured >= 1, "partition tuner: ", settle, " settling and ", measured,
              " measured steps per candidate; at least one must be measured");
  for (const size_t divisor : {1, 4, 16}) {
    const size_t c = std::max(kSmallest, largest_bucket_bytes / divisor);
    if (std::find(candidates_.begin(), candidates_.end(), c) == candidates_.end())
      candidates_.push_back(c);
  }
  totals_.assign(candidates_.size(), 0.0);
}

PartitionTuner::PartitionTuner(std::vector<size_t> candidates, std::string what, int settle,
                               int measured)
    : candidates_(std::move(candidates)),
      what_(std::move(what)),
      settle_(settle),
      measured_(measured) {
  BRAID_CHECK(settle >= 0 && measured >= 1 && !candidates_.empty(), "tuner of the ", what_, ": ",
              candidates_.size(), " candidates, ", settle, " settling and ", measured,
              " measured steps per candidate; at least one of each must be measured");
  totals_.assign(candidates_.size(), 0.0);
}

std::optional<size_t> PartitionTuner::begin_step(
    double previous_seconds, const std::function<void(double*, size_t)>& sum_over_ranks) {
  const int64_t per = settle_ + measured_;
  const int64_t searched = per * static_cast<int64_t>(candidates_.size());
  const int64_t previous = steps_ - 1;  // the step whose time this is
  ++steps_;
  if (chosen_) return std::nullopt;
  if (previous >= 0 && previous % per >= settle_)
    totals_[static_cast<size_t>(previous / per)] += previous_seconds;
  if (previous + 1 < searched) {
    const size_t next = candidates_[static_cast<size_t>((previous + 1) / per)];
    if (previous >= 0 && next == current_) return std::nullopt;
    current_ = next;
    return next;
  }
  summed_ = static_cast<bool>(sum_over_ranks);
  if (summed_) sum_over_ranks(totals_.data(), totals_.size());
  size_t best = 0;
  for (size_t i = 1; i < totals_.size(); ++i)
    if (totals_[i] < totals_[best]) best = i;  // ties stay with the larger, listed first
  for (const double t : totals_) mean_seconds_.push_back(t / measured_);
  chosen_ = candidates_[best];
  if (*chosen_ == current_) return std::nullopt;
  current_ = *chosen_;
  return current_;
}

std::string PartitionTuner::summary() const {
  std::ostringstream out;
  out << what_ << " tuned to " << size_name(*chosen_) << " (";
  for (size_t i = 0; i < candidates_.size(); ++i)
    out << (i ? ", " : "") << size_name(candidates_[i]) << " " << mean_seconds_[i] * 1e3 << " ms";
  out << (summed_ ? " a step, summed over ranks)" : " a step on this rank)");
  return out.str();
}

}  // namespace braid::parallel
