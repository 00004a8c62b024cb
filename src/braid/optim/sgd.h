// SGD with optional momentum and Nesterov momentum, as torch.optim.SGD (PyTorch 1.13)
// with dampening 0:
//   d = g + wd * p                      (decay segments only)
//   b = d on the first step, else b = momentum * b + d
//   d = d + momentum * b if nesterov, else d = b
//   p = p - lr * d
// State: "momentum_buffer" (only when momentum > 0).
#pragma once

#include "optim/optimizer.h"

namespace braid::optim {

struct SgdOptions {
  float momentum = 0;
  bool nesterov = false;  // needs momentum > 0
  float weight_decay = 0;
};

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<Segment> segments, int64_t buffer_size, const SgdOptions& options = {});
  std::string_view name() const override { return "sgd"; }

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  SgdOptions options_;
  float* momentum_ = nullptr;
};

namespace detail {
// The SGD-with-momentum update over one range for an already-formed direction source:
// d = scale * (g + wd * p), then the momentum/Nesterov rule above. Shared with LARS, whose
// scale is the layer's trust ratio. buf may be null when momentum == 0.
void sgd_update(float* params, const float* grads, float* buf, int64_t n, float lr, float scale,
                float wd, float momentum, bool nesterov, bool first);
}  // namespace detail

}  // namespace braid::optim
