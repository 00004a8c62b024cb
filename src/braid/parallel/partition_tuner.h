// Priority scheduling's partition tuned at run time (scheduler.partition_mb 0). ByteScheduler
// (Peng et al., SOSP 2019) tunes its partition size and credit by Bayesian optimisation over
// running steps; braid measures a short list of candidates the same way, on the job's own
// first steps: the best size depends on the link, the model and the CPU of this run, so no
// constant chosen on one machine would do (credit: braid sends one piece at a time, so its
// window is one partition and the partition is the only knob).
//
// Candidates: the largest bucket's bytes divided by 1, 4 and 16, at least kSmallest and
// distinct, the largest first. Each is in use for `settle` steps, then `measured` steps
// whose times add up. A step's time is the wall time from its start to the next step's
// start: forward, backward, the exposed exchange and the deferred updates, what the user
// waits for. Once every candidate is measured, the ranks sum their totals (one sum over
// ranks), so every rank picks the same partition: the least summed time, ties to the larger
// (fewer messages). It stays for the rest of the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace braid::parallel {

class PartitionTuner {
 public:
  static constexpr size_t kSmallest = size_t{4} << 10;  // a piece's cost is its latency

  explicit PartitionTuner(size_t largest_bucket_bytes, int settle = 1, int measured = 3);
  // Given candidates (distinct, the largest first: ties go to the earlier one); `what`
  // names the knob in summary() ("partition", "pull credit").
  PartitionTuner(std::vector<size_t> candidates, std::string what, int settle = 1,
                 int measured = 3);

  // A step starts; `previous_seconds` is the time of the step before it (ignored for the
  // first). `sum_over_ranks` sums values in place over every rank (called once, on the step
  // where the search ends, at the same step on every rank); empty: this rank chooses alone. Returns
  // the partition for this step when it differs from the last one returned (the first call always
  // returns one).
  std::optional<size_t> begin_step(double previous_seconds,
                                   const std::function<void(double*, size_t)>& sum_over_ranks);

  bool done() const { return chosen_.has_value(); }
  const std::vector<size_t>& candidates() const { return candidates_; }
  // After done(): the choice and each candidate's mean step time over every rank.
  size_t chosen() const { return *chosen_; }
  const std::vector<double>& mean_seconds() const { return mean_seconds_; }
  // "partition tuned to 1 MiB (4 MiB 93.1 ms, 1 MiB 90.2 ms, 256 KiB 91.7 ms a step)".
  std::string summary() const;

 private:
  std::vector<size_t> candidates_;
  std::string what_ = "partition";
  int settle_, measured_;
  int64_t steps_ = 0;  // begin_step calls so far
  std::vector<double> totals_;
  std::optional<size_t> chosen_;
  std::vector<double> mean_seconds_;
  bool summed_ = true;
  size_t current_ = 0;
};

}  // namespace braid::parallel
