// Prefetching batch loader: a background thread fills the next batch while the consumer
// trains on the current one (double buffering). The two Batch slots are allocated once, in
// the constructor, so the steady state allocates nothing.
//
// Batch k of an epoch holds this rank's sampler positions [k*B, k*B + size); its content is
// a pure function of (seed, epoch, k), so state() saved mid-epoch and restore()d in a new
// Loader yields bitwise-identical remaining batches. With drop_last the partial last batch
// is skipped (training); without it the last batch has size < B and its tensors have that
// many rows (evaluation).
//
// With a global batch (LoaderOptions::global_batch = G > 0, sampler.h's step blocks) batch
// k is step k: this rank's n_r = batch_share(G, rank, world) samples of positions
// [k G, k G + G), and an epoch is floor(N / G) batches at every world size. So a
// LoaderState (counted in steps) restored into a Loader built for another world size
// continues at the same step, every position of the epoch taken once over all ranks.
//
// Where the global batch itself changes mid-epoch (elastic.scale_lr: G = batch x world),
// steps of the old G do not count steps of the new one; samples do. state_at_sample(e, s)
// is where this loader continues epoch e after s positions of its order were taken: step
// floor(s / G) of a step grid shifted by s mod G (LoaderState::offset; sampler.h's sample
// offset), so its next batch starts at position s exactly, nothing skipped or taken twice,
// and the epoch ends where fewer than G positions remain. A LoaderState with offset 0 is
// the plain one, so a fixed global batch and old checkpoints read as before.
//
// Lifetime: a Batch returned by next() stays valid until the next call to next(),
// start_epoch(), restore() or the destructor. An exception thrown by the Source on the
// worker is rethrown by next() when it reaches that batch (and again on every later call
// until start_epoch/restore). The destructor stops the worker after at most the fill in
// progress. Thread safety: one consumer thread calls every method.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace braid::data {

struct LoaderOptions {
  int64_t batch = 64;
  bool shuffle = true;
  // Skips this rank's partial last *batch*. Not the sampler's ShardMode::drop_last, which
  // cuts the epoch's *order* to a multiple of the world size.
  bool drop_last = false;
  AugmentOptions augment{};
  uint64_t seed = 0;
  int rank = 0;
  int world = 1;
  // How the epoch's order is split over ranks (sampler.h): pad for training, shard for
  // exact evaluation (ranks may then hold different numbers of batches, or none).
  ShardMode sharding = ShardMode::pad;
  // > 0: the samples of a step over all ranks (sampler.h's step blocks). It replaces
  // `batch` (this rank's batch is its share, batch_share), `drop_last` and `sharding`.
  int64_t global_batch = 0;
};

// Evaluation over `world` ranks: rank `rank` reads only its shard of the split, in order,
// with no padding, no dropped samples or batches and no augmentation, so summing every
// rank's EvalTally (eval_tally.h) counts each sample exactly once. A rank may have no
// batches at all (world > N); its Loader then returns nullptr at once.
LoaderOptions sharded_eval_options(int64_t batch, int rank, int world, uint64_t seed = 0);

struct Batch {
  Tensor inputs;      // [size, ...input shape]
  Tensor targets;     // [size, ...target shape]
  int64_t size = 0;   // rows, B except perhaps the last batch of an epoch
  int64_t index = 0;  // batch number within the epoch
};

struct LoaderState {
  int64_t epoch = 0;
  int64_t position = 0;  // batches (with a global batch: steps) already returned in this epoch
  // With a global batch: where the epoch's steps start in its order (state_at_sample gives
  // 0 <= offset < G). Step k takes positions [offset + k G, offset + k G + G).
  int64_t offset = 0;
};

class Loader {
 public:
  Loader(std::shared_ptr<const Source> source, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins epoch `epoch` at its first batch; prefetching starts at once.
  void start_epoch(int64_t epoch);
  // The next batch, or nullptr at the end of the epoch.
  const Batch* next();

  // Batches of a whole epoch (from offset 0).
  int64_t batches_per_epoch() const { return per_epoch_; }
  // Batches of the epoch in progress: fewer than a whole epoch's after an offset.
  int64_t batches_in_epoch() const;
  // Batches of an epoch whose steps start at `offset` (0: batches_per_epoch()).
  int64_t batches_from(int64_t offset) const;
  int64_t samples_per_epoch() const { return sampler_.num_samples_from(0); }
  LoaderState state() const;
  // Continues epoch state.epoch right after state.position batches (of its offset's grid).
  void restore(const LoaderState& state);

  // Positions of the epoch's order (every rank together) taken before `state`'s next
  // batch: offset + position x the step's samples (G, or batch x world without one).
  int64_t sample_of(const LoaderState& state) const;
  // The state that continues epoch `epoch` at position `sample` of its order, whatever
  // global batch took the positions before it. Without a global batch `sample` must be a
  // whole number of steps (batch x world): an Error otherwise.
  LoaderState state_at_sample(int64_t epoch, int64_t sample) const;

  // Seconds next() spent blocked on the worker (cumulative): the 'data wait' of a step.
  double wait_seconds() const { return wait_seconds_; }
  // Seconds the worker spent filling batches (cumulative).
  double fill_seconds() const;

  // As given, but with a global batch `batch` is this rank's share.
  const LoaderOptions& options() const { return options_; }
  const Source& source() const { return *source_; }
  const std::shared_ptr<const Source>& shared_source() const { return source_; }

 private:
  struct Slot {
    Tensor full_inputs, full_targets;  // B rows, allocated once
    std::vector<SampleRef> refs;       // B entries, allocated once
    Batch batch;
    int64_t ready = -1;  // the batch index this slot holds, -1 if none
    std::exception_ptr error;
  };

  void begin(const LoaderState& at);
  int64_t step_samples() const;  // positions of the order one step takes, all ranks together
  bool can_fill() const;
  void worker_loop();
  void fill_slot(Slot& slot, int64_t k, const FillContext& ctx) const;

  std::shared_ptr<const Source> source_;
  LoaderOptions options_;
  Sampler sampler_;
  int64_t per_epoch_ = 0;  // a whole epoch's batches
  Slot slots_[2];
  double wait_seconds_ = 0;

  // Guarded by mu_. The worker reads sampler_, ctx_ and the slot it fills outside the
  // lock; begin() changes them only while the worker is idle and inactive.
  mutable std::mutex mu_;
  std::condition_variable worker_cv_, consumer_cv_;
  FillContext ctx_;
  int64_t generation_ = 0;  // bumped by begin(): a fill from an older one is discarded
  bool active_ = false, failed_ = false, worker_busy_ = false, stop_ = false;
  bool held_ = false;  // the consumer holds batch consumed_ - 1
  int64_t epoch_ = 0, consumed_ = 0, next_fill_ = 0;
  int64_t offset_ = 0, batches_ = 0;  // the epoch in progress: its offset and batches
  double fill_seconds_ = 0;

  std::thread worker_;  // last: starts after everything above is built
};

}  // namespace braid::data
