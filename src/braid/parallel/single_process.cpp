#include "parallel/single_process.h"

#include <algorithm>

#include "core/timer.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {

SingleProcess::SingleProcess(std::unique_ptr<nn::Module> module, StepOptions options)
    : Strategy(std::move(module), std::move(options)) {
  build();
  if (options_.deterministic && options_.accumulate_steps > 1)
    micro_sum_ = TreeSum(params_.size(), static_cast<int>(options_.accumulate_steps));
  params_.add_ready_listener([this](int64_t begin, int64_t end) {
    if (!update_now_) return;
    Stopwatch watch;
    optimizer_->step_range(params_.params(), params_.grad_memory(), lr_, begin, end);
    update_seconds_ += watch.lap();
  });
}

double SingleProcess::step(const data::Batch& batch, float lr, int64_t step) {
  Stopwatch watch;
  times_ = {};
  const int m = options_.accumulate_steps;
  micro_.split(batch, m);
  const bool ordered = options_.deterministic && m > 1;
  const bool fused = !update_needs_whole_gradient() && !ordered;
  // Accumulated in place, each micro-batch's mean loss counts 1/m; in ordered mode the
  // micro-batches are summed in tree_sum.h's order and scaled once at the end, as DDP's
  // ranks' sums are.
  const float scale = m > 1 && !ordered ? 1.0f / static_cast<float>(m) : 1.0f;
  lr_ = lr;
  update_seconds_ = 0;
  double loss_sum = 0;
  params_.zero_grads();
  float* grads = params_.grad_memory();
  for (int p = 0; p < m; ++p) {
    const int k = ordered ? micro_sum_.order()[static_cast<size_t>(p)] : p;
    if (ordered && p > 0) params_.zero_grads();
    loss_sum += forward_loss(micro_[k], step, k, scale);
    update_now_ = fused && p == m - 1;
    backward();
    update_now_ = false;
    if (ordered) micro_sum_.add(p, grads, grads, 0, params_.size());
  }
  watch.lap();
  if (ordered) scale_into(grads, grads, params_.size(), 1.0f / static_cast<float>(m));
  if (fused) {
    optimizer_->finish_step();
    times_.backward -= update_seconds_;
    times_.optimizer = update_seconds_;
  } else {
    clip_and_step(lr);
    times_.optimizer = watch.lap();
  }
  times_.total = watch.elapsed();
  return loss_sum / m;
}

}  // namespace braid::parallel
