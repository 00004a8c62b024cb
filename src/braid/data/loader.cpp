// The prefetching loader. Batch k lives in slot k % 2; the worker may fill batch k once the
// consumer has let go of batch k - 2, i.e. k < consumed + (held ? 1 : 2).
#include "data/loader.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace braid::data {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t checked_size(const std::shared_ptr<const Source>& source) {
  BRAID_CHECK(source != nullptr, "Loader needs a source");
  return source->size();
}

SamplerOptions sampler_options(const LoaderOptions& o) {
  return {.shuffle = o.shuffle,
          .seed = o.seed,
          .rank = o.rank,
          .world = o.world,
          .mode = o.sharding,
          .global_batch = o.global_batch};
}

// A global batch decides this rank's batch: its share of every step.
LoaderOptions with_share(LoaderOptions o) {
  if (o.global_batch > 0) o.batch = batch_share(o.global_batch, o.rank, o.world);
  return o;
}

}  // namespace

LoaderOptions sharded_eval_options(int64_t batch, int rank, int world, uint64_t seed) {
  return {.batch = batch,
          .shuffle = false,
          .drop_last = false,
          .augment = {},
          .seed = seed,
          .rank = rank,
          .world = world,
          .sharding = ShardMode::shard};
}

Loader::Loader(std::shared_ptr<const Source> source, LoaderOptions options)
    : source_(std::move(source)),
      options_(with_share(options)),
      sampler_(checked_size(source_), sampler_options(options_)) {
  BRAID_CHECK(options_.batch > 0, "batch size must be positive, got ", options_.batch);
  BRAID_CHECK(options.augment.crop_pad >= 0, "crop padding must be >= 0, got ",
              options.augment.crop_pad);
  per_epoch_ = batches_ = batches_from(0);
  const int64_t B = options_.batch;
  const Shape in_shape = batch_shape(B, source_->input_shape());
  const Shape target_shape = batch_shape(B, source_->target_shape());
  for (Slot& s : slots_) {
    s.full_inputs = Tensor::empty(in_shape, source_->input_dtype(), MemCategory::data);
    s.full_targets = Tensor::empty(target_shape, source_->target_dtype(), MemCategory::data);
    s.refs.resize(static_cast<size_t>(B));
  }
  ctx_ = {.seed = options.seed, .epoch = 0, .augment = options.augment};
  worker_ = std::thread([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    ++generation_;
  }
  worker_cv_.notify_all();
  worker_.join();
}

int64_t Loader::batches_from(int64_t offset) const {
  const int64_t n = sampler_.num_samples_from(offset), B = options_.batch;
  // Step blocks: n is a whole number of shares, so no batch is partial.
  return options_.drop_last ? n / B : (n + B - 1) / B;
}

int64_t Loader::step_samples() const {
  return options_.global_batch > 0 ? options_.global_batch : options_.batch * options_.world;
}

int64_t Loader::sample_of(const LoaderState& state) const {
  return state.offset + state.position * step_samples();
}

LoaderState Loader::state_at_sample(int64_t epoch, int64_t sample) const {
  const int64_t step = step_samples();
  BRAID_CHECK(sample >= 0 && sample <= sampler_.dataset_size(), "loader: sample ", sample,
              " is outside the epoch's ", sampler_.dataset_size());
  BRAID_CHECK(options_.global_batch > 0 || sample % step == 0, "loader: sample ", sample,
              " is not a whole number of steps of ", options_.world, " ranks x batch ",
              options_.batch, "; only a global batch (step blocks) continues an epoch ",
              "mid-step: set global_batch");
  return {.epoch = epoch, .position = sample / step, .offset = sample % step};
}

void Loader::start_epoch(int64_t epoch) { begin({.epoch = epoch}); }

void Loader::restore(const LoaderState& state) {
  BRAID_CHECK(state.offset == 0 || options_.global_batch > 0, "loader offset ", state.offset,
              ": only a loader with a global batch continues an epoch at a sample offset");
  BRAID_CHECK(state.offset >= 0 && state.offset <= sampler_.dataset_size(), "loader offset ",
              state.offset, " is outside the epoch's ", sampler_.dataset_size(), " samples");
  const int64_t batches = batches_from(state.offset);
  BRAID_CHECK(state.position >= 0 && state.position <= batches, "loader position ", state.position,
              " is outside the epoch's ", batches,
              " batches (was it saved with another batch size, dataset or world size?)");
  begin(state);
}

int64_t Loader::batches_in_epoch() const {
  std::lock_guard lock(mu_);
  return batches_;
}

void Loader::begin(const LoaderState& at) {
  const int64_t epoch = at.epoch;
  BRAID_CHECK(epoch >= 0, "epoch must be >= 0, got ", epoch);
  {
    std::unique_lock lock(mu_);
    ++generation_;
    active_ = false;
    consumer_cv_.wait(lock, [&] { return !worker_busy_; });
    // Builds the epoch's order only when the epoch changes; sets the offset either way.
    sampler_.restore({.epoch = epoch, .cursor = 0, .offset = at.offset});
    ctx_.epoch = epoch;
    epoch_ = epoch;
    offset_ = at.offset;
    batches_ = batches_from(at.offset);
    consumed_ = next_fill_ = at.position;
    held_ = failed_ = false;
    for (Slot& s : slots_) {
      s.ready = -1;
      s.error = nullptr;
    }
    active_ = true;
  }
  worker_cv_.notify_all();
}

LoaderState Loader::state() const {
  std::lock_guard lock(mu_);
  return {epoch_, consumed_, offset_};
}

double Loader::fill_seconds() const {
  std::lock_guard lock(mu_);
  return fill_seconds_;
}

bool Loader::can_fill() const {
  return active_ && !failed_ && next_fill_ < batches_ && next_fill_ < consumed_ + (held_ ? 1 : 2);
}

const Batch* Loader::next() {
  std::unique_lock lock(mu_);
  BRAID_CHECK(active_, "Loader: call start_epoch() or restore() before next()");
  held_ = false;
  worker_cv_.notify_one();
  if (consumed_ >= batches_) return nullptr;
  const int64_t k = consumed_;
  Slot& slot = slots_[k % 2];
  if (slot.ready != k) {
    const auto t0 = Clock::now();
    consumer_cv_.wait(lock, [&] { return slot.ready == k; });
    wait_seconds_ += seconds_since(t0);
  }
  if (slot.error) std::rethrow_exception(slot.error);
  ++consumed_;
  held_ = true;
  return &slot.batch;
}

void Loader::worker_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    worker_cv_.wait(lock, [&] { return stop_ || can_fill(); });
    if (stop_) return;
    const int64_t k = next_fill_++;
    const int64_t generation = generation_;
    const FillContext ctx = ctx_;
    Slot& slot = slots_[k % 2];
    worker_busy_ = true;
    lock.unlock();

    std::exception_ptr error;
    const auto t0 = Clock::now();
    try {
      fill_slot(slot, k, ctx);
    } catch (...) {
      error = std::current_exception();
    }
    const double took = seconds_since(t0);

    lock.lock();
    worker_busy_ = false;
    fill_seconds_ += took;
    if (generation == generation_) {
      slot.ready = k;
      slot.error = error;
      if (error) failed_ = true;
    }
    consumer_cv_.notify_all();
  }
}

void Loader::fill_slot(Slot& slot, int64_t k, const FillContext& ctx) const {
  const int64_t B = options_.batch;
  const int64_t begin = k * B;
  const int64_t n = std::min(B, sampler_.num_samples() - begin);
  for (int64_t j = 0; j < n; ++j)
    slot.refs[static_cast<size_t>(j)] = {sampler_.index(begin + j),
                                         sampler_.global_position(begin + j)};
  slot.batch.inputs = slot.full_inputs.slice_rows(0, n);
  slot.batch.targets = slot.full_targets.slice_rows(0, n);
  slot.batch.size = n;
  slot.batch.index = k;
  source_->fill(std::span<const SampleRef>(slot.refs.data(), static_cast<size_t>(n)), ctx,
                slot.batch.inputs, slot.batch.targets);
}

}  // namespace braid::data
