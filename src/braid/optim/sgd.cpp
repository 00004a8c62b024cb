#include "optim/sgd.h"

#include "core/multiversion.h"

namespace braid::optim {
namespace detail {

// One loop per case so each is a straight vectorisable pass; the direction d is formed
// exactly as the formula in sgd.h (scale * (g + wd p)), which is bitwise torch's when
// scale == 1.
BRAID_MULTIVERSION void sgd_update(float* __restrict p, const float* __restrict g,
                                   float* __restrict buf, int64_t n, float lr, float scale,
                                   float wd, float momentum, bool nesterov, bool first) {
  if (momentum == 0) {
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (scale * (g[i] + wd * p[i]));
  } else if (first && nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = scale * (g[i] + wd * p[i]);
      buf[i] = d;
      p[i] -= lr * (d + momentum * d);
    }
  } else if (first) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = scale * (g[i] + wd * p[i]);
      buf[i] = d;
      p[i] -= lr * d;
    }
  } else if (nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = scale * (g[i] + wd * p[i]);
      const float b = momentum * buf[i] + d;
      buf[i] = b;
      p[i] -= lr * (d + momentum * b);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float b = momentum * buf[i] + scale * (g[i] + wd * p[i]);
      buf[i] = b;
      p[i] -= lr * b;
    }
  }
}

}  // namespace detail

Sgd::Sgd(std::vector<Segment> segments, int64_t buffer_size, const SgdOptions& options)
    : Optimizer(std::move(segments), buffer_size), options_(options) {
  detail::check_non_negative("sgd", "momentum", options.momentum);
  detail::check_non_negative("sgd", "weight_decay", options.weight_decay);
  BRAID_CHECK(!options.nesterov || options.momentum > 0,
              "sgd: nesterov needs momentum > 0 (got momentum = ", options.momentum, ")");
  if (options.momentum > 0) momentum_ = add_state("momentum_buffer");
}

void Sgd::update(float* params, const float* grads, float lr, int64_t step,
                 std::span<const Segment> segments) {
  for (const Segment& s : segments) {
    const float wd = s.decay ? options_.weight_decay : 0.0f;
    detail::sgd_update(params + s.offset, grads + s.offset,
                       momentum_ ? momentum_ + s.offset : nullptr, s.numel, lr, 1.0f, wd,
                       options_.momentum, options_.nesterov, step == 1);
  }
}

}  // namespace braid::optim
