// Dropout(p): inverted dropout as torch.nn.Dropout. Any shape, f32, no parameters.
//
// Mode::train: each element is zeroed with probability p and the survivors are scaled by
// 1/(1-p), so eval needs no rescaling. Mode::eval (and p == 0): identity; the output is
// the input's handle, no copy.
//
// The mask is a pure function of (ctx.rng's seed and stream, this layer's name): declare()
// derives a stream id from the prefix and forward() draws from ctx.rng.fork(id), so a
// rerun, a recomputed forward (activation checkpointing) and every rank that sees the same
// ctx produce the same mask, while two Dropout layers never share one. The mask is kept
// in the cache as one byte per element for backward.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class Dropout : public Module {
 public:
  explicit Dropout(float p);

  std::string_view kind() const override { return "Dropout"; }
  // Remembers the stream id (a hash of prefix); Dropout has no parameters.
  void declare(ParamSet& params, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override { return in; }
  std::unique_ptr<Cache> make_cache() const override;
  // out [...] = x [...] * mask * 1/(1-p)
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  // dx [...] = dy [...] * mask * 1/(1-p)
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

  float p() const { return p_; }
  uint64_t stream_id() const { return stream_id_; }

 private:
  float p_;
  float scale_;  // 1 / (1 - p)
  uint64_t stream_id_;
};

}  // namespace braid::nn
