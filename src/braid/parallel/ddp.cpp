#include "parallel/ddp.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "comm/group.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/timer.h"
#include "parallel/rank0_broadcast.h"
#include "parallel/same_model.h"
#include "parallel/share_weight.h"

namespace braid::parallel {

Ddp::Ddp(std::unique_ptr<nn::Module> module, StepOptions options,
         std::shared_ptr<comm::Group> group, DdpOptions ddp)
    : DataParallel(std::move(module), std::move(options), std::move(group), ddp), ddp_(ddp) {
  declare();
  check_same_model(*group_, params_, "ddp");
  build([this](size_t bytes, MemCategory category) -> nn::FlatMemory {
    // Shared memory is counted under its category too, for as long as ParamSet holds it.
    auto counted = [bytes, category] {
      MemoryTracker::process().on_alloc(category, bytes);
      return std::shared_ptr<void>(
          nullptr, [bytes, category](void*) { MemoryTracker::process().on_free(category, bytes); });
    };
    if (category == MemCategory::gradients && ddp_.shared_gradients) {
      shared_grads_ = comm::allocate_shared(*group_, bytes);
      return {shared_grads_.as<float>(), counted()};
    }
    if (category == MemCategory::parameters && ddp_.shared_parameters) {
      shared_params_ = comm::allocate_shared(*group_, bytes);
      return {shared_params_.as<float>(), counted()};
    }
    auto buffer = std::make_shared<Buffer>(bytes, category);
    return {static_cast<float*>(buffer->data()), buffer};
  });
  ReducerOptions reducer;
  reducer.bucket_bytes = ddp_.bucket_bytes;
  reducer.first_bucket_bytes = ddp_.first_bucket_bytes;
  reducer.deterministic = options_.deterministic;
  reducer.codec = ddp_.codec;
  reducer.priority = ddp_.priority;
  // Tuned (0): whole buckets until the tuner's first choice, a cheap cut to make.
  reducer.partition_bytes =
      ddp_.partition_bytes > 0 ? ddp_.partition_bytes : std::numeric_limits<size_t>::max() / 8;
  make_reducer(reducer, [this](size_t bytes) -> void* {
    if (ddp_.shared_gradients) {
      shared_wire_.push_back(comm::allocate_shared(*group_, bytes));
      return shared_wire_.back().data();
    }
    private_wire_.push_back(std::make_shared<Buffer>(bytes, MemCategory::gradients));
    std::memset(private_wire_.back()->data(), 0, bytes);
    return private_wire_.back()->data();
  });
  use_micro_tree();
  start_engine();
  sync_parameters();
  if (ddp_.priority && ddp_.partition_bytes == 0)
    tuner_.emplace(static_cast<size_t>(reducer_->largest_bucket()) * sizeof(float));
  if (ddp_.priority) {
    updated_.assign(buckets().size(), 0);
    params_.set_use_listener([this](int64_t begin, int64_t end) { update_before_use(begin, end); });
  }
}

Ddp::~Ddp() { stop_engine(); }

void Ddp::start_bucket(size_t i) {
  reducer_->start(i, params_.grad_memory() + reducer_->buckets()[i].begin);
}

double Ddp::communicate_alone() {
  settle();
  Stopwatch watch;
  reducer_->arm(last_step_ + 1);  // past a codec's warm-up, as the steps around it are
  for (size_t i = 0; i < buckets().size(); ++i) start_bucket(i);
  for (size_t i = 0; i < buckets().size(); ++i) reducer_->wait(i, nullptr);
  reducer_->take_report();
  return watch.elapsed();
}

void Ddp::settle() {
  if (!pending_) return;
  for (size_t i = 0; i < updated_.size(); ++i)
    if (updated_[i] == 0) update_bucket(i);
}

void Ddp::before_backward(int p) {
  if (p == 0) settle();  // parameters forward did not announce (unused ones) included
}

void Ddp::update_before_use(int64_t begin, int64_t end) {
  if (!pending_) return;
  const std::vector<Bucket>& all = buckets();
  for (size_t i = 0; i < all.size() && pending_; ++i)
    if (updated_[i] == 0 && all[i].begin < end && begin < all[i].end) update_bucket(i);
}

// Bucket i of the pending step: waited for, averaged and stepped; the step's optimizer
// bookkeeping once the last bucket is in.
void Ddp::update_bucket(size_t i) {
  const Bucket& b = buckets()[i];
  Stopwatch watch;
  reducer_->wait(i, timeline_);
  times_.communication_exposed += watch.lap();
  float* grads = params_.grad_memory();
  const float average = average_factor();
  if (average != 1.0f) scale_into(grads + b.begin, grads + b.begin, b.size(), average);
  optimizer_->step_range(params_.params(), grads, pending_lr_, b.begin, b.end);
  updated_[i] = 1;
  if (++updated_count_ == updated_.size()) {
    optimizer_->finish_step();
    publish_codec_report();
    pending_ = false;
  }
  times_.optimizer += watch.lap();
}

void Ddp::tune_partition() {
  const auto sum = [this](double* values, size_t n) {
    sum_over_ranks(values, n, "the partition tuner's step times");
  };
  if (const auto partition = tuner_->begin_step(since_step_.lap(), sum))
    reducer_->set_partition_bytes(*partition);
  if (tuner_->done() && group_->rank() == 0) log_info("ddp: ", tuner_->summary());
}

void Ddp::load_optimizer_state(const optim::NamedTensors& state) {
  settle();
  Strategy::load_optimizer_state(state);
  reducer_->restore_codec(optimizer_->state());
}

void Ddp::sync_parameters() {
  settle();
  broadcast_parameters(*engine_, params_);
  broadcast_buffers();
  broadcast_tensors(*engine_, optimizer_->state(), "broadcast of rank 0's optimizer state");
}

double Ddp::step(const data::Batch& batch, float lr, int64_t step) {
  check_batch_share(batch, ddp_.global_batch, group_->rank(), group_->size(), name());
  last_step_ = step;
  if (tuner_ && !tuner_->done()) tune_partition();
  Stopwatch watch;
  times_ = {};
  // A model that reads parameters without announcing them first gets every update now.
  if (!module_->announces_use()) settle();
  if (!params_.buffers().empty()) broadcast_buffers();
  times_.communication_exposed += watch.lap();
  const double loss = run_micro_batches(batch, step, /*every_micro=*/false);
  watch.lap();
  // Buckets in the order they went out; without clipping each bucket's update runs while
  // later buckets are still on the wire.
  const bool fused = !update_needs_whole_gradient() && !transactional_;
  if (ddp_.priority && fused) {
    // Each bucket is updated in the next forward, just before its layers read it.
    pending_ = true;
    pending_lr_ = lr;
    std::fill(updated_.begin(), updated_.end(), 0);
    updated_count_ = 0;
    times_.total = watch.elapsed();
    return loss;
  }
  const float average = average_factor();
  float* grads = params_.grad_memory();
  const std::vector<Bucket>& all = buckets();
  for (size_t i = 0; i < all.size(); ++i) {
    const Bucket& b = all[i];
    reducer_->wait(i, timeline_);
    times_.communication_exposed += watch.lap();
    const TimelineSpan span(timeline_, TimelineLane::kCompute, "optimizer",
                            {"bucket", static_cast<int64_t>(i)});
    if (average != 1.0f) scale_into(grads + b.begin, grads + b.begin, b.size(), average);
    if (fused) optimizer_->step_range(params_.params(), grads, lr, b.begin, b.end);
    times_.optimizer += watch.lap();
  }
  if (fused) {
    optimizer_->finish_step();
  } else {
    clip_and_step(lr);
    times_.optimizer += watch.lap();
  }
  publish_codec_report();
  times_.total = watch.elapsed();
  return loss;
}

}  // namespace braid::parallel
