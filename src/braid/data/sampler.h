// Epoch-seeded sampler with distributed sharding, as torch's DistributedSampler with
// drop_last=False: each epoch's order is a Fisher-Yates shuffle driven by
// Rng(seed, epoch) (or the identity without shuffling), padded by repeating its head to a
// multiple of the world size; rank r of w takes positions r, r+w, r+2w, ... of it. Every
// rank therefore sees ceil(N / w) samples, together covering all N. With w = 1 it is the
// plain permutation.
//
// The order is a pure function of (seed, epoch), and the state is (epoch, cursor), so a
// restored sampler continues with exactly the same indices. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::data {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  int rank = 0;
  int world = 1;
};

struct SamplerState {
  int64_t epoch = 0;
  int64_t cursor = 0;  // this rank's samples already taken in the epoch
};

class Sampler {
 public:
  Sampler(int64_t size, SamplerOptions options);

  // Builds the epoch's order and rewinds the cursor. Allocates only on the first call.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  int64_t dataset_size() const { return size_; }
  // Samples this rank takes per epoch: ceil(N / world).
  int64_t num_samples() const { return per_rank_; }
  // This rank's j-th sample of the epoch, and its position in the padded global order
  // (j * world + rank), which keys per-sample randomness independently of the world size.
  int64_t index(int64_t j) const;
  int64_t global_position(int64_t j) const { return j * options_.world + options_.rank; }

  // Iteration: the next index, or -1 at the end of the epoch.
  int64_t next();
  int64_t cursor() const { return cursor_; }
  SamplerState state() const { return {epoch_, cursor_}; }
  void restore(const SamplerState& state);

  // The epoch's full order before padding and sharding (size N).
  const std::vector<int64_t>& permutation() const { return order_; }

 private:
  int64_t size_, per_rank_;
  SamplerOptions options_;
  std::vector<int64_t> order_;
  int64_t epoch_ = -1, cursor_ = 0;
};

}  // namespace braid::data
