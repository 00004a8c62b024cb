// Shuffling and sharding; padding is implicit (position p of the padded order is p mod N of
// the permutation), so it costs no memory. drop_last and shard only shorten a rank's share,
// so every mode reads the same order at the same global positions.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace braid::data {

std::string_view shard_mode_name(ShardMode m) {
  switch (m) {
    case ShardMode::pad:
      return "pad";
    case ShardMode::drop_last:
      return "drop_last";
    case ShardMode::shard:
      return "shard";
    case ShardMode::local:
      return "local";
  }
  return "?";
}

ShardMode parse_shard_mode(std::string_view text, std::string_view key) {
  for (const ShardMode m : {ShardMode::pad, ShardMode::drop_last, ShardMode::shard})
    if (text == shard_mode_name(m)) return m;
  BRAID_THROW(Error, "'", key, "' is '", text,
              "'; use 'pad' (every rank ceil(N/world) samples, the head repeated), 'drop_last' "
              "(floor(N/world), the tail dropped) or 'shard' (each sample once, uneven shards)");
}

int64_t shard_size(int64_t size, int rank, int world, ShardMode mode) {
  BRAID_CHECK(size >= 0, "dataset size must be >= 0, got ", size);
  BRAID_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " is not in a world of ",
              world);
  switch (mode) {
    case ShardMode::pad:
      return (size + world - 1) / world;
    case ShardMode::drop_last:
      return size / world;
    case ShardMode::shard:
      return rank < size ? (size - rank + world - 1) / world : 0;
    case ShardMode::local:
      return size;
  }
  return 0;
}

int64_t batch_share(int64_t global_batch, int rank, int world) {
  BRAID_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " is not in a world of ",
              world);
  BRAID_CHECK(global_batch >= world, "a global batch of ", global_batch, " cannot give each of ",
              world, " ranks a sample of every step; use a global batch of at least ", world);
  return (global_batch - rank + world - 1) / world;
}

Sampler::Sampler(int64_t size, SamplerOptions options)
    : size_(size),
      options_(options),
      share_(options.global_batch > 0
                 ? batch_share(options.global_batch, options.rank, options.world)
                 : 0),
      per_rank_(share_ > 0 ? size / options.global_batch * share_
                           : shard_size(size, options.rank, options.world, options.mode)) {
  BRAID_CHECK(size >= 0, "dataset size must be >= 0, got ", size);
  BRAID_CHECK(options.global_batch >= 0, "global batch must be >= 0, got ", options.global_batch);
}

void Sampler::set_epoch(int64_t epoch) {
  BRAID_CHECK(epoch >= 0, "epoch must be >= 0, got ", epoch);
  order_.resize(static_cast<size_t>(size_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates: for i from N-1 down, swap i with a uniform j in [0, i].
    Rng rng(options_.seed, static_cast<uint64_t>(epoch));
    for (int64_t i = size_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
    }
  }
  epoch_ = epoch;
  cursor_ = 0;
  offset_ = 0;
  per_rank_ = num_samples_from(0);
}

int64_t Sampler::num_samples_from(int64_t offset) const {
  if (share_ == 0) return shard_size(size_, options_.rank, options_.world, options_.mode);
  return (size_ - offset) / options_.global_batch * share_;
}

int64_t Sampler::index(int64_t j) const {
  BRAID_CHECK(epoch_ >= 0, "Sampler: call set_epoch() before drawing indices");
  BRAID_CHECK(j >= 0 && j < per_rank_, "sample ", j, " of ", per_rank_, " per rank");
  // local: the order is this rank's own, read from its start.
  if (share_ == 0 && options_.mode == ShardMode::local) return order_[static_cast<size_t>(j)];
  // Invariant: only pad reaches positions >= N (the repeated head); step blocks stop at
  // offset + floor((N - offset) / G) G <= N.
  return order_[static_cast<size_t>(global_position(j) % size_)];
}

int64_t Sampler::next() {
  if (cursor_ >= per_rank_) return -1;
  return index(cursor_++);
}

void Sampler::restore(const SamplerState& state) {
  BRAID_CHECK(state.offset == 0 || share_ > 0, "sampler offset ", state.offset,
              ": only step blocks (a global batch) continue an epoch at a sample offset; "
              "without one, restore at offset 0");
  BRAID_CHECK(state.offset >= 0 && state.offset <= size_, "sampler offset ", state.offset,
              " is outside the epoch's ", size_, " positions");
  const int64_t per_rank = num_samples_from(state.offset);
  BRAID_CHECK(state.cursor >= 0 && state.cursor <= per_rank, "sampler cursor ", state.cursor,
              " is outside the epoch's ", per_rank,
              " samples (was the state saved with another "
              "dataset size, world size or shard mode?)");
  if (state.epoch != epoch_) set_epoch(state.epoch);
  offset_ = state.offset;
  per_rank_ = per_rank;
  cursor_ = state.cursor;
}

}  // namespace braid::data
