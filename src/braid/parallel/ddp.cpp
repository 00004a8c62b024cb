#include "parallel/ddp.h"

#include <algorithm>
#include <cstring>

#include "comm/group.h"
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
}

Ddp::~Ddp() { stop_engine(); }

void Ddp::start_bucket(size_t i) {
  reducer_->start(i, params_.grad_memory() + reducer_->buckets()[i].begin);
}

double Ddp::communicate_alone() {
  Stopwatch watch;
  reducer_->arm(last_step_ + 1);  // past a codec's warm-up, as the steps around it are
  for (size_t i = 0; i < buckets().size(); ++i) start_bucket(i);
  for (size_t i = 0; i < buckets().size(); ++i) reducer_->wait(i, nullptr);
  reducer_->take_report();
  return watch.elapsed();
}

void Ddp::sync_parameters() {
  broadcast_parameters(*engine_, params_);
  broadcast_buffers();
  broadcast_tensors(*engine_, optimizer_->state(), "broadcast of rank 0's optimizer state");
}

double Ddp::step(const data::Batch& batch, float lr, int64_t step) {
  check_batch_share(batch, ddp_.global_batch, group_->rank(), group_->size(), name());
  last_step_ = step;
  Stopwatch watch;
  times_ = {};
  if (!params_.buffers().empty()) broadcast_buffers();
  times_.communication_exposed += watch.lap();
  const double loss = run_micro_batches(batch, step, /*every_micro=*/false);
  watch.lap();
  // Buckets in the order they went out; without clipping each bucket's update runs while
  // later buckets are still on the wire.
  const bool fused = !update_needs_whole_gradient() && !transactional_;
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
