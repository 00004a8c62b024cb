// What one rank's evaluation adds up, and how ranks combine it. With the evaluation loader
// in ShardMode::shard (sharded_eval_options, loader.h) every sample of the split lies in
// exactly one rank's shard, so the sum of all ranks' tallies is the tally of one process
// over the whole split: `count` equals N and `correct` is exact. Every rank that applies
// the same reduction gets the same loss and accuracy.
//
// A rank with an empty shard (world > N) tallies zeros and still takes part in the one
// reduction, so uneven shards never leave a rank waiting in a collective: each rank
// reduces once, after its loop, however many batches it read.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace braid::data {

struct EvalTally {
  double loss_sum = 0;  // sum over samples of the per-sample loss
  int64_t correct = 0;
  int64_t count = 0;
  // Regression and multi-label tasks, over every predicted element (add_errors): the sums
  // of squared and absolute errors, the elements on the right side of 0 (a logit > 0 for a
  // target >= 0.5), and how many elements.
  double squared_error_sum = 0;
  double absolute_error_sum = 0;
  int64_t label_hits = 0;
  int64_t elements = 0;

  // A batch of `count` samples whose mean loss is `mean_loss`.
  void add_batch(double mean_loss, int64_t batch_correct, int64_t batch_count) {
    loss_sum += mean_loss * static_cast<double>(batch_count);
    correct += batch_correct;
    count += batch_count;
  }
  // A batch's predictions against its numeric targets, element by element (n of each).
  void add_errors(const float* pred, const float* target, int64_t n);
  EvalTally& operator+=(const EvalTally& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    squared_error_sum += o.squared_error_sum;
    absolute_error_sum += o.absolute_error_sum;
    label_hits += o.label_hits;
    elements += o.elements;
    return *this;
  }
  double loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const {
    return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  }
  // Means over every element (0 when none was added).
  double mse() const { return per_element(squared_error_sum); }
  double mae() const { return per_element(absolute_error_sum); }
  double label_accuracy() const { return per_element(static_cast<double>(label_hits)); }

  // The numbers as one f64 buffer for a sum-allreduce, and back. Counts are exact in f64 up
  // to 2^53 samples; unpack() refuses anything that is not a whole count.
  static constexpr size_t kPacked = 7;
  std::array<double, kPacked> pack() const;
  static EvalTally unpack(std::span<const double, kPacked> summed);

 private:
  double per_element(double sum) const {
    return elements ? sum / static_cast<double>(elements) : 0.0;
  }
};

// The tallies of ranks 0, 1, ... summed in rank order (a gather-based reduction, or a
// test's reference): the same bits on every rank that sums them.
EvalTally sum_in_rank_order(std::span<const EvalTally> per_rank);

}  // namespace braid::data
