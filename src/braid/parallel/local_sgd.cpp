#include "parallel/local_sgd.h"

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

void LocalSgd::average(bool optimizer_state) {
  const float mean = 1.0f / static_cast<float>(world_size());
  const int64_t t0 = timeline_ ? Timeline::now() : 0;
  // Uneven shares: the weighted mean sum_r (w n_r / G) x_r / w. Scaled before the
  // allreduce starts, which is when peers begin to read this rank's shared parameters.
  const float weight = share_weight();
  auto weigh = [weight](float* v, int64_t n) {
    if (weight != 1.0f) scale_into(v, v, n, weight);
  };
  weigh(params_.params(), params_.size());
  engine()
      .iallreduce(params_.params(), static_cast<size_t>(params_.size()), DType::f32, ReduceOp::sum,
                  comm::OpLabel("average of parameters"))
      .wait();
  scale_into(params_.params(), params_.params(), params_.size(), mean);
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
