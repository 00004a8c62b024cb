#include "optim/lars.h"

#include <cmath>

#include "core/kernels.h"
#include "optim/sgd.h"

namespace braid::optim {

Lars::Lars(std::vector<Segment> segments, int64_t buffer_size, const LarsOptions& options)
    : Optimizer(std::move(segments), buffer_size), options_(options) {
  detail::check_non_negative("lars", "momentum", options.momentum);
  detail::check_non_negative("lars", "weight_decay", options.weight_decay);
  detail::check_non_negative("lars", "trust_coefficient", options.trust_coefficient);
  BRAID_CHECK(!options.nesterov || options.momentum > 0,
              "lars: nesterov needs momentum > 0 (got momentum = ", options.momentum, ")");
  if (options.momentum > 0) momentum_ = add_state("momentum_buffer");
}

void Lars::update(float* params, const float* grads, float lr, int64_t step,
                  std::span<const Segment> segments) {
  for (const Segment& s : segments) {
    float* p = params + s.offset;
    const float* g = grads + s.offset;
    float local = 1.0f;
    float wd = 0.0f;
    if (s.decay) {
      wd = options_.weight_decay;
      const double p_norm = std::sqrt(sum_squares(p, s.numel));
      const double g_norm = std::sqrt(sum_squares(g, s.numel));
      if (p_norm > 0 && g_norm > 0) {
        local = static_cast<float>(options_.trust_coefficient * p_norm /
                                   (g_norm + options_.weight_decay * p_norm));
      }
    }
    detail::sgd_update(p, g, momentum_ ? momentum_ + s.offset : nullptr, s.numel, lr, local, wd,
                       options_.momentum, options_.nesterov, step == 1);
  }
}

}  // namespace braid::optim
