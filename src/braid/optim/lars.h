// LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017, "Large Batch
// Training of Convolutional Networks"), with SGD momentum as torch.optim.SGD applies it
// (NVIDIA apex's LARC without clipping, wrapped around SGD). For each decay segment
// (a layer's weight), with norms over the segment in double:
//   local = eta * ||p|| / (||g|| + wd * ||p||)      (1 when ||p|| or ||g|| is 0)
//   d = local * (g + wd * p)
// Segments with decay = false (biases, normalisation) take d = g: no weight decay and no
// trust ratio, the common practice for LARS. Then, as SGD with dampening 0:
//   b = d on the first step, else b = momentum * b + d
//   p = p - lr * (d + momentum * b if nesterov else b)
// State: "momentum_buffer" (only when momentum > 0).
//
// A segment is one layer: a ZeRO shard that splits a tensor must give the trust ratio the
// whole tensor's norms, which this class does not do yet.
#pragma once

#include "optim/optimizer.h"

namespace braid::optim {

struct LarsOptions {
  float momentum = 0;
  bool nesterov = false;  // needs momentum > 0
  float weight_decay = 0;
  float trust_coefficient = 0.001f;  // eta
};

class Lars final : public Optimizer {
 public:
  Lars(std::vector<Segment> segments, int64_t buffer_size, const LarsOptions& options = {});
  std::string_view name() const override { return "lars"; }

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  LarsOptions options_;
  float* momentum_ = nullptr;
};

}  // namespace braid::optim
