#include "optim/onebit_adam.h"

#include <cassert>
#include <cmath>

#include "core/error.h"
#include "core/multiversion.h"

namespace braid::optim {
namespace {

// One frozen-variance pass over a segment; the scalars are formed in double by the caller,
// as Adam's are, so the step size of a step is the one Adam would use.
BRAID_MULTIVERSION void frozen_kernel(float* __restrict p, const float* __restrict momentum,
                                      float* __restrict m, const float* __restrict v, int64_t n,
                                      float keep, float step_size, float bias_correction2_sqrt,
                                      float eps) {
  for (int64_t i = 0; i < n; ++i) {
    const float mi = momentum[i];
    m[i] = mi;
    const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
    // A float whose variance froze at 0 never had a gradient (an embedding row of a token
    // not seen in the warm-up): its 1-bit momentum is the codec's scale, not a signal, and
    // divided by eps alone it would throw the parameter to infinity. It stays.
    const float update = v[i] > 0 ? step_size * (mi / denom) : 0.0f;
    p[i] = p[i] * keep - update;
  }
}

}  // namespace

OnebitAdam::OnebitAdam(std::vector<Segment> segments, int64_t buffer_size,
                       const OnebitAdamOptions& options)
    : Optimizer(segments, buffer_size),
      options_(options),
      adam_(std::move(segments), buffer_size, options.adam) {
  BRAID_CHECK(options.adam.weight_decay == 0 || options.adam.decoupled_weight_decay,
              "onebit_adam: weight decay must be decoupled (AdamW's form): L2 decay in the "
              "gradient would enter the optimizer's variance and not its codec's");
  BRAID_CHECK(options.freeze_step >= 1, "onebit_adam: freeze_step = ", options.freeze_step,
              " must be >= 1 (the variance it freezes is formed by Adam steps)");
  // Adam's state tensors share its memory: the frozen phase works on the same m and v.
  const NamedTensors s = adam_.state();
  exp_avg_ = s[0].second.f32();
  exp_avg_sq_ = s[1].second.f32();
}

void OnebitAdam::warm_up(float* params, const float* grads, float lr, int64_t step,
                         std::span<const Segment> segments) {
  assert(adam_.steps() + 1 == step);
  (void)step;
  if (!segments.empty()) {
    // The span is a run of segments by offset, so this range holds them and no others.
    const Segment& last = segments.back();
    adam_.step_range(params, grads, lr, segments.front().offset, last.offset + last.numel);
    adam_segments_ += segments.size();
  }
  if (adam_segments_ == segments_.size()) {
    adam_.finish_step();
    adam_segments_ = 0;
  }
}

void OnebitAdam::update(float* params, const float* grads, float lr, int64_t step,
                        std::span<const Segment> segments) {
  if (step <= options_.freeze_step) return warm_up(params, grads, lr, step, segments);
  const AdamOptions& o = options_.adam;
  const double beta1 = o.beta1, beta2 = o.beta2;
  const auto step_size =
      static_cast<float>(lr / (1.0 - std::pow(beta1, static_cast<double>(step))));
  const auto bc2_sqrt = static_cast<float>(
      std::sqrt(1.0 - std::pow(beta2, static_cast<double>(options_.freeze_step))));
  for (const Segment& s : segments) {
    const double wd = s.decay ? o.weight_decay : 0.0;
    frozen_kernel(params + s.offset, grads + s.offset, exp_avg_ + s.offset, exp_avg_sq_ + s.offset,
                  s.numel, static_cast<float>(1.0 - lr * wd), step_size, bc2_sqrt, o.eps);
  }
}

NamedTensors OnebitAdam::state() const {
  if (loading_step_) return Optimizer::state();  // no state of its own: the step alone
  NamedTensors out = adam_.state();
  // Adam's count stops at freeze_step; the optimizer's is the one to resume from.
  Tensor step = Tensor::empty(Shape{}, DType::i64, MemCategory::optimizer);
  *step.data<int64_t>() = steps();
  out.back().second = std::move(step);
  return out;
}

void OnebitAdam::load_state(const NamedTensors& state) {
  // Adam's checks cover every name, dtype and shape (and the step's sign) before it copies
  // anything, so a bad checkpoint changes nothing; the count alone is left to load.
  adam_.load_state(state);
  adam_segments_ = 0;
  NamedTensors step_only;
  for (const auto& [name, t] : state)
    if (name == "step") step_only.emplace_back(name, t);
  loading_step_ = true;
  try {
    Optimizer::load_state(step_only);
  } catch (...) {
    loading_step_ = false;
    throw;
  }
  loading_step_ = false;
}

}  // namespace braid::optim
