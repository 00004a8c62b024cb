// Epoch-seeded sampler with distributed sharding, as torch.utils.data.DistributedSampler.
//
// Each epoch's global order is a Fisher-Yates shuffle driven by Rng(seed, epoch) (or the
// identity without shuffling); it depends only on (seed, epoch), never on the rank, the
// world size or the history, so every rank computes the same order. Rank r of w then
// takes positions r, r+w, r+2w, ... of that order; how the tail is handled is the
// ShardMode, for a dataset of N samples and w ranks:
//
//   pad        torch's drop_last=False (the default). The order is padded by repeating
//              its head to a multiple of w: every rank takes ceil(N / w) samples, and up
//              to w - 1 samples are seen twice in the epoch.
//   drop_last  torch's drop_last=True. The order is cut to a multiple of w: every rank
//              takes floor(N / w) samples, and up to w - 1 samples (the tail of this
//              epoch's order) are skipped this epoch.
//   shard      no padding, no dropping (torch has no built-in mode; Lightning's
//              UnrepeatedDistributedSampler does this): rank r takes positions r, r + w, ... < N,
//              i.e. ceil((N - r) / w) samples, 0 where r >= N. Every sample exactly once.
//
//   local      the source is already this rank's own (a file-sharded dataset,
//              data/npy_shards.h): the rank shuffles it by (seed, epoch) and takes every
//              position of that order, N samples, for positions j w + r (as pad keys
//              them, so per-sample randomness differs between ranks). The ranks' sources
//              must be the same size for them to step together (npy_shards pads them).
//
// pad and drop_last give every rank the same number of samples, so ranks step in lock
// step (training); shard counts each sample exactly once (exact evaluation), so ranks may
// take different numbers of batches, and ranks r >= N take none. With w = 1 every mode is
// the plain permutation.
//
// Step blocks (SamplerOptions::global_batch = G > 0), for a global batch that stays G
// whatever the world size (elastic training: 4 ranks, then 3, then 4 again). The order is
// read in steps of G consecutive positions, and in step t rank r of w takes positions
//
//   t G + r + k w,   k < n_r = ceil((G - r) / w)   (batch_share: 22, 21, 21 for G 64, w 3),
//
// so the ranks' shares of a step are uneven when w does not divide G, but together they
// are the block [t G, t G + G) exactly once, and a position belongs to the same step at
// every world size: samplers built for another world continue at the same step with no
// sample skipped or seen twice. When w divides G this is the ShardMode::pad layout read in
// batches of G / w (rank r's j-th sample is position j w + r), bit for bit. The epoch is
// floor(N / G) whole steps, at every world size; the last N mod G positions of the order
// are skipped this epoch (as training's drop_last skips a partial batch; nothing is
// repeated, so no padding is needed). The mode is not used. Where w divides G, pad
// counts the same steps except when N mod G > G - w: then its padding made one more step
// whose last samples repeat the head of the order.
//
// A sample offset (SamplerState::offset = o, step blocks only) starts the steps o positions
// into the epoch's order: step t is the block [o + t G, o + t G + G), and the epoch is
// floor((N - o) / G) whole steps. It continues an epoch whose first o positions were taken
// at another global batch (elastic.scale_lr: the global batch follows the world size), at
// the next position none of them took, the last partial step skipped as before. Without an
// offset nothing changes.
//
// The order is a pure function of (seed, epoch), and the state is (epoch, cursor, offset),
// so a restored sampler continues with exactly the same indices. Not thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace braid::data {

enum class ShardMode : uint8_t { pad, drop_last, shard, local };
std::string_view shard_mode_name(ShardMode m);
// "pad", "drop_last" or "shard" (local is chosen by the dataset, never by name); anything else is
// an error naming `key` and the value.
ShardMode parse_shard_mode(std::string_view text, std::string_view key = "shard_mode");

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  int rank = 0;
  int world = 1;
  ShardMode mode = ShardMode::pad;
  // > 0: step blocks of this many positions, shared by the ranks (see above); 0: the mode.
  int64_t global_batch = 0;
};

struct SamplerState {
  int64_t epoch = 0;
  int64_t cursor = 0;  // this rank's samples already taken in the epoch (after the offset)
  // Step blocks: positions of the epoch's order taken before this sampler's step 0 (at
  // another global batch); 0 <= offset <= N. Always 0 without step blocks.
  int64_t offset = 0;
};

// Samples rank `rank` of `world` takes per epoch from a dataset of `size` in `mode`.
int64_t shard_size(int64_t size, int rank, int world, ShardMode mode);
// n_r: the samples rank `rank` of `world` takes in each step of `global_batch` positions,
// ceil((global_batch - rank) / world). An error unless global_batch >= world (every rank
// needs a sample of each step).
int64_t batch_share(int64_t global_batch, int rank, int world);

class Sampler {
 public:
  Sampler(int64_t size, SamplerOptions options);

  // Builds the epoch's order and rewinds the cursor and the offset. Allocates only on the
  // first call.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  int64_t dataset_size() const { return size_; }
  const SamplerOptions& options() const { return options_; }
  // Samples this rank takes in this epoch (see the table above; fewer after an offset).
  int64_t num_samples() const { return per_rank_; }
  // The same for an epoch begun `offset` positions into its order (step blocks).
  int64_t num_samples_from(int64_t offset) const;
  // Step blocks: this rank's samples of each step (n_r); 0 without.
  int64_t step_share() const { return share_; }
  // This rank's j-th sample of the epoch, and its position in the (padded) global order
  // (j * world + rank; with step blocks offset + t G + rank + k world for j = t n_r + k),
  // which keys per-sample randomness independently of the world size.
  int64_t index(int64_t j) const;
  int64_t global_position(int64_t j) const {
    if (share_ == 0) return j * options_.world + options_.rank;
    return offset_ + j / share_ * options_.global_batch + options_.rank +
           j % share_ * options_.world;
  }

  // Iteration: the next index, or -1 at the end of the epoch.
  int64_t next();
  int64_t cursor() const { return cursor_; }
  SamplerState state() const { return {epoch_, cursor_, offset_}; }
  void restore(const SamplerState& state);

  // The epoch's full order before padding and sharding (size N).
  const std::vector<int64_t>& permutation() const { return order_; }

 private:
  int64_t size_;
  SamplerOptions options_;
  int64_t share_ = 0;  // n_r with step blocks, else 0
  int64_t per_rank_;
  std::vector<int64_t> order_;
  int64_t epoch_ = -1, cursor_ = 0, offset_ = 0;
};

}  // namespace braid::data
