#include "optim/adagrad.h"

#include <cmath>

#include "core/kernels.h"
#include "core/multiversion.h"

namespace braid::optim {
namespace {

BRAID_MULTIVERSION void adagrad_kernel(float* __restrict p, const float* __restrict g,
                                       float* __restrict sum, int64_t n, float clr, float eps,
                                       float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    const float si = sum[i] + gi * gi;
    sum[i] = si;
    p[i] -= clr * (gi / (std::sqrt(si) + eps));
  }
}

}  // namespace

Adagrad::Adagrad(std::vector<Segment> segments, int64_t buffer_size, const AdagradOptions& options)
    : Optimizer(std::move(segments), buffer_size), options_(options) {
  detail::check_non_negative("adagrad", "eps", options.eps);
  detail::check_non_negative("adagrad", "lr_decay", options.lr_decay);
  detail::check_non_negative("adagrad", "initial_accumulator_value",
                             options.initial_accumulator_value);
  detail::check_non_negative("adagrad", "weight_decay", options.weight_decay);
  sum_ = add_state("sum");
  // Only the segments' ranges: padding stays zero, as in every other state buffer.
  for (const Segment& s : segments_)
    fill(options.initial_accumulator_value, sum_ + s.offset, s.numel);
}

void Adagrad::update(float* params, const float* grads, float lr, int64_t step,
                     std::span<const Segment> segments) {
  const auto clr =
      static_cast<float>(lr / (1.0 + static_cast<double>(step - 1) * options_.lr_decay));
  for (const Segment& s : segments) {
    const float wd = s.decay ? options_.weight_decay : 0.0f;
    adagrad_kernel(params + s.offset, grads + s.offset, sum_ + s.offset, s.numel, clr, options_.eps,
                   wd);
  }
}

}  // namespace braid::optim
