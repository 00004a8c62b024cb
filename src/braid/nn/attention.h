// CausalSelfAttention: GPT-2's multi-head masked self-attention (as nanoGPT's module).
// Input x [B, T, D] f32, output [B, T, D]:
//   qkv = c_attn(x) [B, T, 3D]; q, k, v = its three D-wide column blocks, each viewed as
//   [B, T, H, hd] (hd = D / H); per (b, h): P = softmax(q k^T / sqrt(hd)) with position t
//   attending to s <= t only; y = P v; heads re-joined into [B, T, D]; out = c_proj(y).
// c_attn = Linear(D, 3D) and c_proj = Linear(D, D), named "<prefix>c_attn." and
// "<prefix>c_proj."; init() is PyTorch's Linear default. No dropout. The cache keeps P
// ([B, H, T, T], zero above the diagonal) for backward; the per-head work
// (attention_kernels.h) touches only the causal triangle.
#pragma once

#include "nn/linear.h"

namespace braid::nn {

class CausalSelfAttention : public Module {
 public:
  // local_heads < heads: this rank's share of the heads under tensor parallelism (Megatron's
  // head-parallel attention): c_attn = Linear(dim, 3 local_heads hd) makes only their q, k,
  // v, and c_proj = Linear(local_heads hd, dim, proj_bias) their part of the output, which
  // the ranks' parts sum to. 0: every head.
  CausalSelfAttention(int64_t dim, int64_t heads, int64_t local_heads = 0, bool proj_bias = true);

  std::string_view kind() const override { return "CausalSelfAttention"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override;

  int64_t dim() const { return dim_; }
  int64_t heads() const { return heads_; }
  Linear& c_attn() { return c_attn_; }
  Linear& c_proj() { return c_proj_; }

 private:
  int64_t dim_, heads_, head_dim_, local_heads_, inner_;  // inner_ = local_heads_ hd
  Linear c_attn_, c_proj_;
};

}  // namespace braid::nn
