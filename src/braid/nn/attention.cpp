#include "nn/attention.h"

#include <cmath>

#include "core/convert.h"
#include "nn/attention_kernels.h"

namespace braid::nn {
namespace {

class AttentionCache : public Cache {
 public:
  std::unique_ptr<Cache> c_attn, c_proj;
  Tensor att;      // [B, H, T, T] probabilities, zero above the diagonal
  Tensor y;        // [B, T, D] heads re-joined, c_proj's input (bf16 under bf16)
  Tensor y_block;  // [T, D] one sequence's heads in fp32, before rounding
  Tensor dqkv;     // [B, T, 3D]
  Tensor work;     // per-head scratch of the kernels
};

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, int64_t local_heads,
                                         bool proj_bias)
    : dim_(dim),
      heads_(heads),
      head_dim_(heads > 0 ? dim / heads : 0),
      local_heads_(local_heads > 0 ? local_heads : heads),
      inner_(local_heads_ * head_dim_),
      c_attn_(dim, 3 * inner_),
      c_proj_(inner_, dim, proj_bias) {
  BRAID_CHECK(heads_ > 0 && dim_ % heads_ == 0, "CausalSelfAttention(", dim_, ", ", heads_,
              "): the model width must be a positive multiple of the number of heads");
  BRAID_CHECK(local_heads_ <= heads_, "CausalSelfAttention: ", local_heads_, " local heads of ",
              heads_);
}

void CausalSelfAttention::declare(ParamSet& params, const std::string& prefix) {
  c_attn_.declare(params, prefix + "c_attn.");
  c_proj_.declare(params, prefix + "c_proj.");
}

void CausalSelfAttention::init(Rng& rng) {
  c_attn_.init(rng);
  c_proj_.init(rng);
}

Shape CausalSelfAttention::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 3 && in[2] == dim_, "CausalSelfAttention(", dim_, ", ", heads_,
              "): input shape ", in.str(), " is not [batch, time, ", dim_, "]");
  return in;
}

std::unique_ptr<Cache> CausalSelfAttention::make_cache() const {
  auto cache = std::make_unique<AttentionCache>();
  cache->c_attn = c_attn_.make_cache();
  cache->c_proj = c_proj_.make_cache();
  return cache;
}

const Tensor& CausalSelfAttention::forward(const Tensor& x, Cache& cache,
                                           const ForwardContext& ctx) {
  auto& c = static_cast<AttentionCache&>(cache);
  // bf16: LayerNorm's output rounded for c_attn (rounded_output.h).
  BRAID_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16,
              "CausalSelfAttention: input must be f32 (or bf16 under precision bf16), got ",
              dtype_name(x.dtype()));
  const Shape shape = output_shape(x.shape());
  // W: the width of this rank's heads (the model's, without tensor parallelism).
  const int64_t B = shape[0], T = shape[1], W = inner_, H = local_heads_, hd = head_dim_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* qkv = c_attn_.forward(x, *c.c_attn, ctx).f32();
  c.att.ensure({B, H, T, T});
  // Under bf16, y is c_proj's operand: each sequence's heads are joined in fp32 scratch
  // and rounded, and only the bf16 copy is kept (as rounded_output.h).
  const bool round_y = ctx.precision == Precision::bf16;
  c.y.ensure({B, T, W}, round_y ? DType::bf16 : DType::f32);
  if (round_y) c.y_block.ensure({T, W}, DType::f32, MemCategory::workspace);
  c.work.ensure({attention_work_floats(T, hd)}, DType::f32, MemCategory::workspace);
  for (int64_t b = 0; b < B; ++b) {
    float* yb = round_y ? c.y_block.f32() : c.y.f32() + b * T * W;
    for (int64_t h = 0; h < H; ++h) {
      // q, k, v of this head: [T, hd] with row stride 3W inside the qkv buffer.
      const float* q = qkv + b * T * 3 * W + h * hd;
      attention_head_forward(q, q + W, q + 2 * W, 3 * W, T, hd, scale,
                             c.att.f32() + (b * H + h) * T * T, yb + h * hd, W, c.work.f32());
    }
    if (round_y) f32_to_bf16(yb, c.y.data<BFloat16>() + b * T * W, T * W);
  }
  return c_proj_.forward(c.y, *c.c_proj, ctx);
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<AttentionCache&>(cache);
  const Shape& shape = c.y.shape();
  const int64_t B = shape[0], T = shape[1], W = inner_, H = local_heads_, hd = head_dim_;
  BRAID_CHECK(dy.shape() == Shape({B, T, dim_}), "CausalSelfAttention: backward got dy ",
              dy.shape().str(), " for input ", Shape({B, T, dim_}).str());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* dyh = c_proj_.backward(dy, *c.c_proj, true).f32();
  const float* qkv = c.c_attn->out.f32();
  c.dqkv.ensure({B, T, 3 * W}, DType::f32, MemCategory::activation_grads);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* q = qkv + b * T * 3 * W + h * hd;
      float* dq = c.dqkv.f32() + b * T * 3 * W + h * hd;
      attention_head_backward(q, q + W, q + 2 * W, 3 * W, c.att.f32() + (b * H + h) * T * T,
                              dyh + b * T * W + h * hd, W, T, hd, scale, dq, dq + W, dq + 2 * W,
                              3 * W, c.work.f32());
    }
  return c_attn_.backward(c.dqkv, *c.c_attn, need_dx);
}

double CausalSelfAttention::forward_flops(const Shape& in) const {
  // The projections plus the two attention GEMMs counted dense (q k^T and P v), the usual
  // convention for model FLOP figures even though the causal half is skipped.
  const double B = static_cast<double>(in[0]), T = static_cast<double>(in[1]);
  Shape inner = in;
  inner[-1] = inner_;
  return c_attn_.forward_flops(in) + c_proj_.forward_flops(inner) +
         4.0 * B * T * T * static_cast<double>(inner_);
}

}  // namespace braid::nn
