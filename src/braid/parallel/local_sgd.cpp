#include "parallel/local_sgd.h"

#include <cstring>

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/timer.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {
namespace {

DdpOptions with_shared_parameters(DdpOptions ddp) {
  ddp.shared_parameters = true;
  return ddp;
}

}  // namespace

LocalSgd::LocalSgd(std::unique_ptr<nn::Module> module, StepOptions options,
                   std::shared_ptr<comm::Group> group, LocalSgdOptions local, DdpOptions ddp)
    : Ddp(std::move(module), std::move(options), std::move(group), with_shared_parameters(ddp)),
      local_(local) {
  BRAID_CHECK(local_.period >= 1, "local_sgd: period must be >= 1, got ", local_.period);
  BRAID_CHECK(local_.start_step >= 0, "local_sgd: start_step must be >= 0, got ",
              local_.start_step);
  ReducerOptions r;
  r.bucket_bytes = ddp.bucket_bytes;
  r.first_bucket_bytes = ddp.first_bucket_bytes;
  r.codec = ddp.codec;
  // Its own codec state: a parameter change is not a gradient, so error feedback keeps
  // what the averages lost apart from what the DDP steps' exchanges lost.
  averager_ = std::make_unique<GradientReducer>(params_, group_, r);
  const bool compressed = !averager_->codec().plain_sum();
  engine()
      .submit("local_sgd: the averager's buffers",
              [this](comm::Group&) {
                averager_->prepare([this](size_t bytes) -> void* {
                  wire_.push_back(Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::f32,
                                                MemCategory::gradients));
                  std::memset(wire_.back().raw(), 0, bytes);
                  return wire_.back().raw();
                });
              })
      .wait();
  averager_->use_engine(&engine());
  if (compressed) {
    anchor_ = Tensor::empty({params_.size()}, DType::f32, MemCategory::parameters);
    change_ = Tensor::empty({params_.size()}, DType::f32, MemCategory::gradients);
    std::memcpy(anchor_.f32(), params_.params(), static_cast<size_t>(params_.size()) * 4);
  }
}

void LocalSgd::sum_parameters_over_ranks(float* values) {
  const std::vector<GradientReducer::Bucket>& buckets = averager_->buckets();
  averager_->arm(averages_);
  for (size_t i = 0; i < buckets.size(); ++i) averager_->start(i, values + buckets[i].begin);
  for (size_t i = 0; i < buckets.size(); ++i) averager_->wait(i, nullptr);
  codec_report_ = averager_->take_report();
}

double LocalSgd::step(const data::Batch& batch, float lr, int64_t step) {
  if (step < local_.start_step) return Ddp::step(batch, lr, step);
  const double loss = local_step(batch, lr, step);
  if ((step + 1 - local_.start_step) % local_.period == 0) {
    Stopwatch watch;
    average(/*optimizer_state=*/false);
    ++averages_;
    const double seconds = watch.elapsed();
    times_.communication_exposed += seconds;
    times_.total += seconds;
  }
  return loss;
}

// DDP's step without its exchange: the listener that starts buckets stays idle.
double LocalSgd::local_step(const data::Batch& batch, float lr, int64_t step) {
  Stopwatch watch;
  times_ = {};
  MicroBatches& micro = micro_batches();
  micro.split(batch, options_.accumulate_steps);
  const double loss = accumulate_micro_batches(micro, step, rank(), world_size());
  watch.lap();
  const TimelineSpan span(timeline_, TimelineLane::kCompute, "optimizer");
  clip_and_step(lr);
  times_.optimizer = watch.lap();
  times_.total = watch.elapsed();
  return loss;
}

void LocalSgd::synchronize() { average(/*optimizer_state=*/true); }

void LocalSgd::sync_parameters() {
  Ddp::sync_parameters();
  if (anchor_.defined())
    std::memcpy(anchor_.f32(), params_.params(), static_cast<size_t>(params_.size()) * 4);
}

void LocalSgd::average(bool optimizer_state) {
  const float mean = 1.0f / static_cast<float>(world_size());
  const int64_t t0 = timeline_ ? Timeline::now() : 0;
  // Uneven shares: the weighted mean sum_r (w n_r / G) x_r / w. Scaled before the
  // allreduce starts, which is when peers begin to read this rank's shared parameters.
  const float weight = share_weight();
  auto weigh = [weight](float* v, int64_t n) {
    if (weight != 1.0f) scale_into(v, v, n, weight);
  };
  float* params = params_.params();
  const int64_t n = params_.size();
  if (!anchor_.defined()) {
    weigh(params, n);
    sum_parameters_over_ranks(params);
    scale_into(params, params, n, mean);
  } else {
    // The change since the last average crosses the wire; every rank adds the mean change
    // to the same anchor, so the parameters agree bitwise again.
    float* change = change_.f32();
    const float* anchor = anchor_.f32();
    for (int64_t i = 0; i < n; ++i) change[i] = params[i] - anchor[i];
    weigh(change, n);
    sum_parameters_over_ranks(change);
    for (int64_t i = 0; i < n; ++i) params[i] = anchor[i] + change[i] * mean;
    std::memcpy(anchor_.f32(), params, static_cast<size_t>(n) * sizeof(float));
  }
  // Buffers and optimizer state are small beside the parameters: one operation for all.
  optim::NamedTensors state;
  if (optimizer_state) state = optimizer_->state();
  for (const nn::NamedBuffer& b : params_.buffers())
    if (b.value.dtype() == DType::f32) weigh(static_cast<float*>(b.value.raw()), b.value.numel());
  for (const auto& [name, t] : state)
    if (t.dtype() == DType::f32) weigh(static_cast<float*>(t.raw()), t.numel());
  engine()
      .submit("average of buffers and optimizer state",
              [this, &state](comm::Group& g) {
                for (const nn::NamedBuffer& b : params_.buffers())
                  if (b.value.dtype() == DType::f32)
                    comm::allreduce(g, b.value.raw(), static_cast<size_t>(b.value.numel()),
                                    DType::f32, ReduceOp::sum);
                for (const auto& [name, t] : state)
                  if (t.dtype() == DType::f32)
                    comm::allreduce(g, t.raw(), static_cast<size_t>(t.numel()), DType::f32,
                                    ReduceOp::sum);
              })
      .wait();
  for (const nn::NamedBuffer& b : params_.buffers())
    if (b.value.dtype() == DType::f32) {
      auto* v = static_cast<float*>(b.value.raw());
      scale_into(v, v, b.value.numel(), mean);
    }
  for (const auto& [name, t] : state)
    if (t.dtype() == DType::f32) {
      auto* v = static_cast<float*>(t.raw());
      scale_into(v, v, t.numel(), mean);
    }
  if (timeline_)
    timeline_->record(TimelineLane::kComm, "average of parameters", t0, Timeline::now(),
                      {"floats", params_.size()});
}

}  // namespace braid::parallel
