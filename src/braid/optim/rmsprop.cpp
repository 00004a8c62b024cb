#include "optim/rmsprop.h"

#include <cmath>

#include "core/multiversion.h"

namespace braid::optim {
namespace {

BRAID_MULTIVERSION void rmsprop_kernel(float* __restrict p, const float* __restrict g,
                                       float* __restrict sq, int64_t n, float lr, float alpha,
                                       float one_minus_alpha, float eps, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    const float si = alpha * sq[i] + one_minus_alpha * gi * gi;
    sq[i] = si;
    p[i] -= lr * (gi / (std::sqrt(si) + eps));
  }
}

BRAID_MULTIVERSION void rmsprop_momentum_kernel(float* __restrict p, const float* __restrict g,
                                                float* __restrict sq, float* __restrict buf,
                                                int64_t n, float lr, float alpha,
                                                float one_minus_alpha, float eps, float wd,
                                                float momentum) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    const float si = alpha * sq[i] + one_minus_alpha * gi * gi;
    sq[i] = si;
    const float bi = momentum * buf[i] + gi / (std::sqrt(si) + eps);
    buf[i] = bi;
    p[i] -= lr * bi;
  }
}

}  // namespace

RmsProp::RmsProp(std::vector<Segment> segments, int64_t buffer_size, const RmsPropOptions& options)
    : Optimizer(std::move(segments), buffer_size), options_(options) {
  detail::check_non_negative("rmsprop", "alpha", options.alpha);
  detail::check_non_negative("rmsprop", "eps", options.eps);
  detail::check_non_negative("rmsprop", "momentum", options.momentum);
  detail::check_non_negative("rmsprop", "weight_decay", options.weight_decay);
  square_avg_ = add_state("square_avg");
  if (options.momentum > 0) momentum_ = add_state("momentum_buffer");
}

void RmsProp::update(float* params, const float* grads, float lr, int64_t,
                     std::span<const Segment> segments) {
  const auto one_minus_alpha = static_cast<float>(1.0 - options_.alpha);
  for (const Segment& s : segments) {
    const float wd = s.decay ? options_.weight_decay : 0.0f;
    if (momentum_) {
      rmsprop_momentum_kernel(params + s.offset, grads + s.offset, square_avg_ + s.offset,
                              momentum_ + s.offset, s.numel, lr, options_.alpha, one_minus_alpha,
                              options_.eps, wd, options_.momentum);
    } else {
      rmsprop_kernel(params + s.offset, grads + s.offset, square_avg_ + s.offset, s.numel, lr,
                     options_.alpha, one_minus_alpha, options_.eps, wd);
    }
  }
}

}  // namespace braid::optim
