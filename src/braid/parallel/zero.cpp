#include "parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/timer.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "parallel/buckets.h"
#include "parallel/rank0_broadcast.h"
#include "parallel/same_model.h"
#include "parallel/share_weight.h"

namespace braid::parallel {
namespace {

// The pieces of the parameters inside [begin, begin + count) of the flat layout, with
// offsets from begin: the segments of one chunk's optimizer.
std::vector<optim::Segment> segments_in(const nn::ParamSet& params, int64_t begin, int64_t count) {
  std::vector<optim::Segment> out;
  for (const nn::ParamInfo& p : params.layout()) {
    const int64_t lo = std::max(p.offset, begin);
    const int64_t hi = std::min(p.offset + p.numel(), begin + count);
    if (lo < hi) out.push_back({p.name, lo - begin, hi - lo, p.decay});
  }
  return out;
}

}  // namespace

Zero::Zero(std::unique_ptr<nn::Module> module, StepOptions options,
           std::shared_ptr<comm::Group> group, ZeroOptions zero)
    : DataParallel(std::move(module), std::move(options), std::move(group), zero), zero_(zero) {
  BRAID_CHECK(zero_.stage >= 1 && zero_.stage <= 3, "zero_stage ", zero_.stage,
              " does not exist: 1 shards the optimizer state, 2 the gradients too, 3 the "
              "parameters too (0: ddp)");
  BRAID_CHECK(zero_.stage == 1 || !options_.deterministic || options_.accumulate_steps == 1,
              "zero_stage ", zero_.stage,
              " reduces every micro-batch, but deterministic mode sums a rank's "
              "micro-batches before the ranks'; use zero_stage 1, or accumulate_steps 1");
  const std::string& opt = options_.optimizer.name;
  BRAID_CHECK(opt != "lars" && opt != "lamb", "zero_stage shards the optimizer by ranges, but ",
              opt,
              " scales each parameter by its whole norm, which no range holds; use sgd, adam, "
              "adamw, rmsprop or adagrad, or drop zero_stage");
  declare();
  check_same_model(*group_, params_, "zero");
  make_buckets();
  if (zero_.stage >= 2) params_.set_grad_locator([this](size_t id) { return grad_in_slot(id); });
  if (zero_.stage == 3) {
    params_.set_param_locator({[this](size_t id) { return param_in_window(id); },
                               [this] { return full_.defined() ? full_.f32() : nullptr; }});
    // The initial values are written here, then each rank keeps its chunks of rank 0's.
    full_ = Tensor::empty({params_.size() + group_->size()}, DType::f32, MemCategory::parameters);
    params_.set_use_listener([this](int64_t begin, int64_t end) { prefetch(begin, end); });
  }
  // Stage 1: N floats past the end, where the first bucket's last chunk is padded.
  const auto tail = static_cast<size_t>(group_->size()) * sizeof(float);
  build(
      [tail](size_t bytes, MemCategory category) -> nn::FlatMemory {
        auto buffer = std::make_shared<Buffer>(bytes + tail, category);
        return {static_cast<float*>(buffer->data()), buffer};
      },
      /*with_optimizer=*/false);
  if (zero_.stage == 1) use_micro_tree();
  start_engine();
  sync_parameters();
}

Zero::~Zero() { stop_engine(); }

void Zero::make_buckets() {
  const int r = group_->rank();
  // Stage 2 keeps a few buckets' gradients at a time: buckets of at most 1/32 of the model
  // (and of bucket_bytes) keep that window a small part of what DDP holds; the largest
  // parameter is the floor (a bucket holds whole parameters).
  ReducerOptions reducer;
  reducer.bucket_bytes = zero_.bucket_bytes;
  if (zero_.stage >= 2)
    reducer.bucket_bytes =
        std::min(reducer.bucket_bytes,
                 std::max(zero_.first_bucket_bytes, static_cast<size_t>(params_.size()) * 4 / 32));
  reducer.first_bucket_bytes = zero_.first_bucket_bytes;
  reducer.reduce_scatter = true;
  reducer.deterministic = options_.deterministic;
  reducer.codec = zero_.codec;
  make_reducer(reducer, [this](size_t bytes) -> void* {
    wire_.push_back(
        Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::f32, MemCategory::gradients));
    std::memset(wire_.back().raw(), 0, bytes);
    return wire_.back().raw();
  });
  for (const GradientReducer::Bucket& range : reducer_->buckets()) {
    Bucket b;
    b.begin = range.begin;
    b.end = range.end;
    b.chunk = range.chunk;
    b.mine = std::clamp<int64_t>(b.end - b.chunk_begin(r), 0, b.chunk);
    b.shard_offset = shard_size_;
    shard_size_ += b.chunk;
    b.optimizer = optim::make_optimizer(options_.optimizer,
                                        segments_in(params_, b.chunk_begin(r), b.mine), b.chunk);
    largest_chunk_ = std::max(largest_chunk_, b.chunk);
    buckets_.push_back(std::move(b));
  }
  reduced_ = Tensor::empty({shard_size_}, DType::f32, MemCategory::gradients);
  if (zero_.stage == 3) {
    master_ = Tensor::empty({shard_size_}, DType::f32, MemCategory::parameters);
    param_slot_of_bucket_.assign(buckets_.size(), -1);
  }
  if (zero_.stage >= 2) {
    slot_of_bucket_.assign(buckets_.size(), -1);
    bucket_of_param_.assign(params_.layout().size(), 0);
    for (size_t i = 0; i < buckets_.size(); ++i)
      for (size_t id = 0; id < params_.layout().size(); ++id) {
        const int64_t offset = params_.layout()[id].offset;
        if (offset >= buckets_[i].begin && offset < buckets_[i].end) bucket_of_param_[id] = i;
      }
    // Two slots to start: one written by backward, one on the wire. More are added when a
    // model holds several buckets open at once (a tied embedding's, written first and last).
    for (int k = 0; k < std::min<int>(2, static_cast<int>(buckets_.size())); ++k)
      slots_.push_back({Tensor::empty({slot_floats()}, DType::f32, MemCategory::gradients)});
  }
}

float* Zero::bucket_grads(const Bucket& b) {
  if (zero_.stage == 1) return params_.grad_memory() + b.begin;
  const int64_t s = slot_of_bucket_[static_cast<size_t>(&b - buckets_.data())];
  BRAID_CHECK(s >= 0, "zero: a bucket's gradients were asked for outside backward");
  return slots_[static_cast<size_t>(s)].memory.f32();
}

// Stage 2 after the first micro-batch: into the slot's room past the N chunks, to be added.
float* Zero::bucket_sum(const Bucket& b) {
  if (zero_.stage == 1 || first_micro_) return reduced_.f32() + b.shard_offset;
  return bucket_grads(b) + group_->size() * largest_chunk_;
}

// N chunks, and one more for the sums of micro-batches after the first.
int64_t Zero::slot_floats() const {
  return (group_->size() + (options_.accumulate_steps > 1 ? 1 : 0)) * largest_chunk_;
}

float* Zero::grad_in_slot(size_t id) {
  const size_t i = bucket_of_param_[id];
  if (slot_of_bucket_[i] < 0) {
    const size_t s = take_slot();
    slots_[s].bucket = static_cast<int64_t>(i);
    slot_of_bucket_[i] = static_cast<int64_t>(s);
  }
  return bucket_grads(buckets_[i]) + (params_.layout()[id].offset - buckets_[i].begin);
}

size_t Zero::take_slot() {
  for (;;) {
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].bucket < 0) return s;
    if (in_flight_.empty()) break;
    finish_reduce(in_flight_.front());  // frees its slot
  }
  // Every slot holds a bucket backward has not finished: one more (first steps only).
  slots_.push_back({Tensor::empty({slot_floats()}, DType::f32, MemCategory::gradients)});
  return slots_.size() - 1;
}

void Zero::finish_reduce(size_t i) {
  Bucket& b = buckets_[i];
  reducer_->wait(i, timeline_);
  if (zero_.stage == 1) return;
  const auto it = std::find(in_flight_.begin(), in_flight_.end(), i);
  if (it == in_flight_.end()) return;  // finished before
  in_flight_.erase(it);
  if (!first_micro_) {
    const float* sum = bucket_sum(b);
    float* into = reduced_.f32() + b.shard_offset;
    for (int64_t k = 0; k < b.chunk; ++k) into[k] += sum[k];
  }
  slots_[static_cast<size_t>(slot_of_bucket_[i])].bucket = -1;
  slot_of_bucket_[i] = -1;
}

void Zero::on_ready(int64_t begin, int64_t end) {
  // Stage 3: backward is done with [begin, end) and goes on below it; start gathering the
  // two buckets it reads next (bucket indices grow as addresses fall).
  if (zero_.stage == 3 && !full_.defined() && begin > 0) {
    size_t next = 0;
    while (next < buckets_.size() && buckets_[next].begin > begin - 1) ++next;
    for (size_t j = next; j < std::min(next + 2, buckets_.size()); ++j) gather_bucket(j, false);
  }
  DataParallel::on_ready(begin, end);
}

// Stage 2 and 3 reduce every micro-batch: the ones before the last finish before the next
// micro-batch's backward writes the slots again.
void Zero::after_micro(int p) {
  if (zero_.stage >= 2 && p < options_.accumulate_steps - 1)
    while (!in_flight_.empty()) finish_reduce(in_flight_.front());
}

void Zero::start_reduce(size_t index) {
  Bucket& b = buckets_[index];
  // Stage 1 reads N chunks from the bucket's start: the pad is the (final) floats just
  // above it. Stage 2's slot has room for the pad, zeroed. The pointers are taken here, on
  // the compute thread, which alone touches the slots' table.
  float* grads = bucket_grads(b);
  float* sum = bucket_sum(b);
  count_sent(b);
  if (zero_.stage >= 2) {
    std::fill(grads + (b.end - b.begin), grads + group_->size() * b.chunk, 0.0f);
    in_flight_.push_back(index);
  }
  reducer_->start(index, grads, sum);
}

void Zero::update(Bucket& b, float lr) {
  float* params = zero_.stage == 3 ? master_.f32() + b.shard_offset
                                   : params_.params() + b.chunk_begin(group_->rank());
  b.optimizer->step(params, reduced_.f32() + b.shard_offset, lr);
}

void Zero::start_gather(Bucket& b) {
  if (zero_.stage == 3) return;  // gathered where forward and backward need it
  count_sent(b);
  // In place: this rank's chunk is already where the all-gather puts it.
  float* params = params_.params();
  b.gathered = engine_->iallgather(
      params + b.chunk_begin(group_->rank()), params + b.begin, static_cast<size_t>(b.chunk),
      DType::f32,
      comm::OpLabel("all-gather of parameter bucket", static_cast<int64_t>(&b - buckets_.data())));
}

bool Zero::overflow_anywhere() {
  double flag = 0;
  for (const Bucket& b : buckets_)
    if (optim::LossScaler::has_overflow(
            {reduced_.f32() + b.shard_offset, static_cast<size_t>(b.mine)}))
      flag = 1;
  sum_over_ranks(&flag, 1, "overflow vote");
  return flag > 0;
}

float Zero::clip_factor() {
  double squares = 0;
  for (const Bucket& b : buckets_)
    squares += optim::grad_sum_squares(reduced_.f32() + b.shard_offset, b.optimizer->segments());
  sum_over_ranks(&squares, 1, "gradient norm");
  return optim::clip_coefficient(std::sqrt(squares), options_.clip_grad_norm);
}

double Zero::step(const data::Batch& batch, float lr, int64_t step) {
  check_batch_share(batch, zero_.global_batch, group_->rank(), group_->size(), "zero");
  Stopwatch watch;
  times_ = {};
  if (!params_.buffers().empty()) broadcast_buffers();
  times_.communication_exposed += watch.lap();
  if (zero_.stage == 3) full_ = Tensor();  // a materialized copy serves between steps only
  bytes_sent_ = 0;
  gather_wait_ = 0;
  // Stage 2 reduces every micro-batch (its gradients have nowhere to accumulate), adding
  // the sums into the reduced chunks; stage 1 only the last, as DDP.
  const double loss = run_micro_batches(batch, step, /*every_micro=*/zero_.stage >= 2);
  watch.lap();
  const float average = average_factor();
  auto reduce_and_average = [&](Bucket& b) {
    finish_reduce(static_cast<size_t>(&b - buckets_.data()));
    times_.communication_exposed += watch.lap();
    if (average != 1.0f) {
      float* g = reduced_.f32() + b.shard_offset;
      scale_into(g, g, b.chunk, average);
    }
  };
  // Stage 3: no gather may still read the master chunks the updates write.
  if (zero_.stage == 3) drop_window();
  if (!update_needs_whole_gradient()) {
    // Each bucket's update and all-gather while later buckets are still being reduced.
    for (Bucket& b : buckets_) {
      reduce_and_average(b);
      update(b, lr);
      start_gather(b);
      times_.optimizer += watch.lap();
    }
  } else {
    for (Bucket& b : buckets_) reduce_and_average(b);
    times_.optimizer += watch.lap();
    float factor = 1.0f;
    if (scaler_) {
      const float loss_scale = scaler_->scale();  // what this step's gradients carry
      if (scaler_->update(overflow_anywhere())) {
        times_.total = watch.elapsed();
        publish_codec_report();
        return loss;  // skipped on every rank: the weights never see the inf
      }
      for (Bucket& b : buckets_) {
        float* g = reduced_.f32() + b.shard_offset;
        scale_into(g, g, b.chunk, 1.0f / loss_scale);
      }
    }
    if (options_.clip_grad_norm > 0) factor = clip_factor();
    times_.communication_exposed += watch.lap();
    for (Bucket& b : buckets_) {
      if (factor != 1.0f)
        optim::scale_grads(reduced_.f32() + b.shard_offset, b.optimizer->segments(), factor);
      update(b, lr);
      start_gather(b);
    }
    times_.optimizer += watch.lap();
  }
  for (Bucket& b : buckets_) b.gathered.wait();
  times_.communication_exposed += watch.lap() + gather_wait_;
  publish_codec_report();
  times_.total = watch.elapsed();
  return loss;
}

// The optimizer state is not broadcast: every rank loaded its chunks from the same files.
void Zero::sync_parameters() {
  if (zero_.stage == 3 && !full_.defined()) materialize();
  broadcast_parameters(*engine_, params_);
  broadcast_buffers();
  if (zero_.stage == 3) scatter_from_full();
}

void Zero::synchronize() {
  if (zero_.stage == 3 && !full_.defined()) materialize();
}

void Zero::prepare_to_load() { synchronize(); }

// Buckets from the lowest address up: each all-gather's pad writes into the bucket above,
// which is gathered after it.
void Zero::materialize() {
  drop_window();
  full_ = Tensor::empty({params_.size() + group_->size()}, DType::f32, MemCategory::parameters);
  for (size_t i = buckets_.size(); i-- > 0;) {
    const Bucket& b = buckets_[i];
    engine_
        ->iallgather(master_.f32() + b.shard_offset, full_.f32() + b.begin,
                     static_cast<size_t>(b.chunk), DType::f32,
                     comm::OpLabel("all-gather of the whole parameters", static_cast<int64_t>(i)))
        .wait();
  }
}

void Zero::scatter_from_full() {
  const int r = group_->rank();
  for (const Bucket& b : buckets_) {
    float* chunk = master_.f32() + b.shard_offset;
    std::memcpy(chunk, full_.f32() + b.chunk_begin(r), static_cast<size_t>(b.mine) * sizeof(float));
    std::fill(chunk + b.mine, chunk + b.chunk, 0.0f);
  }
  full_ = Tensor();
  drop_window();
}

float* Zero::param_in_window(size_t id) {
  const int64_t offset = params_.layout()[id].offset;
  if (full_.defined()) return full_.f32() + offset;
  const size_t i = bucket_of_param_[id];
  gather_bucket(i, /*wait=*/true);
  return param_slots_[static_cast<size_t>(param_slot_of_bucket_[i])].memory.f32() +
         (offset - buckets_[i].begin);
}

void Zero::gather_bucket(size_t i, bool wait) {
  int64_t s = param_slot_of_bucket_[i];
  if (s < 0) {
    s = static_cast<int64_t>(take_param_slot());
    ParamSlot& slot = param_slots_[static_cast<size_t>(s)];
    slot.bucket = static_cast<int64_t>(i);
    param_slot_of_bucket_[i] = s;
    const Bucket& b = buckets_[i];
    count_sent(b);
    slot.gathered = engine_->iallgather(
        master_.f32() + b.shard_offset, slot.memory.f32(), static_cast<size_t>(b.chunk), DType::f32,
        comm::OpLabel("all-gather of parameter bucket", static_cast<int64_t>(i)));
  }
  ParamSlot& slot = param_slots_[static_cast<size_t>(s)];
  slot.last_use = ++use_clock_;
  if (wait && !slot.gathered.done()) {
    Stopwatch watch;
    slot.gathered.wait();
    gather_wait_ += watch.elapsed();  // inside forward's or backward's time
  }
}

// A free slot, a new one while there are fewer than kParamSlots, else the least recently
// used (a module reads at most two buckets at once: its weight's and its bias's).
size_t Zero::take_param_slot() {
  for (size_t s = 0; s < param_slots_.size(); ++s)
    if (param_slots_[s].bucket < 0) return s;
  if (param_slots_.size() < kParamSlots) {
    param_slots_.push_back(
        {Tensor::empty({group_->size() * largest_chunk_}, DType::f32, MemCategory::parameters)});
    return param_slots_.size() - 1;
  }
  size_t lru = 0;
  for (size_t s = 1; s < param_slots_.size(); ++s)
    if (param_slots_[s].last_use < param_slots_[lru].last_use) lru = s;
  ParamSlot& slot = param_slots_[lru];
  slot.gathered.wait();
  param_slot_of_bucket_[static_cast<size_t>(slot.bucket)] = -1;
  slot.bucket = -1;
  return lru;
}

void Zero::drop_window() {
  for (ParamSlot& slot : param_slots_) {
    if (slot.bucket < 0) continue;
    slot.gathered.wait();
    param_slot_of_bucket_[static_cast<size_t>(slot.bucket)] = -1;
    slot.bucket = -1;
  }
}

// Forward is about to read [begin, end): its buckets' gathers start (a few at most), and
// the next bucket's, which forward reads after these.
void Zero::prefetch(int64_t begin, int64_t end) {
  if (full_.defined()) return;
  size_t started = 0, lowest = buckets_.size();
  for (size_t i = 0; i < buckets_.size() && started + 2 < kParamSlots; ++i) {
    if (buckets_[i].end <= begin || buckets_[i].begin >= end) continue;
    gather_bucket(i, /*wait=*/false);
    ++started;
    lowest = std::min(lowest, i);
  }
  if (lowest < buckets_.size() && lowest > 0 && started + 2 < kParamSlots)
    gather_bucket(lowest - 1, /*wait=*/false);
}

std::string_view Zero::optimizer_name() const { return buckets_.front().optimizer->name(); }

void Zero::gather_for_checkpoint() {
  const int n = group_->size(), r = group_->rank();
  const bool root = r == 0;
  // Every chunk optimizer names its buffers alike, in the same order.
  const optim::NamedTensors first = buckets_.front().optimizer->state();
  gathered_state_.clear();
  std::vector<float> staging;
  for (size_t k = 0; k < first.size(); ++k) {
    const auto& [name, sample] = first[k];
    if (sample.dtype() != DType::f32) {  // the step count: the same on every rank
      gathered_state_.emplace_back(name, sample);
      continue;
    }
    Tensor full;
    if (root) full = Tensor::empty({params_.size()}, DType::f32, MemCategory::optimizer);
    for (const Bucket& b : buckets_) {
      const Tensor mine = b.optimizer->state()[k].second;
      if (root) staging.resize(static_cast<size_t>(b.chunk * n));
      engine_
          ->submit("gather of optimizer state for a checkpoint",
                   [&](comm::Group& g) {
                     comm::gather(g, mine.raw(), root ? staging.data() : nullptr,
                                  static_cast<size_t>(b.chunk), DType::f32, 0);
                   })
          .wait();
      if (root)
        std::memcpy(full.f32() + b.begin, staging.data(),
                    static_cast<size_t>(b.end - b.begin) * sizeof(float));
    }
    if (root) gathered_state_.emplace_back(name, full);
  }
}

optim::NamedTensors Zero::optimizer_state() const {
  BRAID_CHECK(group_->rank() == 0 && !gathered_state_.empty(),
              "zero: the full optimizer state is gathered on rank 0 by gather_for_checkpoint()");
  return gathered_state_;
}

void Zero::load_optimizer_state(const optim::NamedTensors& state) {
  const int r = group_->rank();
  // Each chunk's optimizer checks names, dtypes and shapes; the full tensors are checked
  // against the layout first so an error names the checkpoint's shape.
  for (const auto& [name, t] : state)
    BRAID_CHECK(t.dtype() != DType::f32 || t.numel() == params_.size(), "optimizer state '", name,
                "' holds ", t.numel(), " floats; this model's layout has ", params_.size());
  for (Bucket& b : buckets_) {
    optim::NamedTensors part;
    for (const auto& [name, t] : state) {
      if (t.dtype() != DType::f32) {
        part.emplace_back(name, t);
        continue;
      }
      Tensor slice = Tensor::empty({b.chunk}, DType::f32, MemCategory::optimizer);
      std::memcpy(slice.f32(), t.f32() + b.chunk_begin(r),
                  static_cast<size_t>(b.mine) * sizeof(float));
      part.emplace_back(name, slice);
    }
    b.optimizer->load_state(part);
  }
}

}  // namespace braid::parallel
