#include "nn/layernorm.h"

#include <cmath>

#include "nn/fast_math.h"
#include "nn/rounded_output.h"

namespace braid::nn {
namespace {

class LayerNormCache : public Cache {
 public:
  Tensor mean, rstd;  // [rows]
  Tensor block;       // fp32 rows before rounding, when the output is bf16
};

// Reductions with 16 partial sums in a fixed order: vectorisable without -ffast-math and
// independent of the instruction set chosen at load time.
[[gnu::always_inline]] inline float sum_centered_squares(const float* x, float mean, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += (x[i + k] - mean) * (x[i + k] - mean);
  float s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

[[gnu::always_inline]] inline float plain_sum(const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += x[i + k];
  float s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  for (; i < n; ++i) s += x[i];
  return s;
}

[[gnu::always_inline]] inline void layernorm_forward(const float* x, const float* w, const float* b,
                                                     float* y, float* mean_out, float* rstd_out,
                                                     int64_t rows, int64_t dim, float eps) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    // Two passes: the centred variance does not cancel catastrophically.
    const float mean = plain_sum(xr, dim) * inv_dim;
    const float var = sum_centered_squares(xr, mean, dim) * inv_dim;
    const float rstd = 1.0f / std::sqrt(var + eps);
    for (int64_t j = 0; j < dim; ++j) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
    mean_out[r] = mean;
    rstd_out[r] = rstd;
  }
}

// With xhat = (x - mean) rstd and g = dy * w:
//   dw += dy * xhat, db += dy, dx = rstd (g - mean(g) - xhat mean(g xhat)).
[[gnu::always_inline]] inline void layernorm_backward(const float* x, const float* w,
                                                      const float* dy, const float* mean,
                                                      const float* rstd, float* dw, float* db,
                                                      float* dx, int64_t rows, int64_t dim) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const float m = mean[r], s = rstd[r];
    float acc_g[16] = {}, acc_gx[16] = {};
    int64_t j = 0;
    for (; j + 16 <= dim; j += 16)
      for (int k = 0; k < 16; ++k) {
        const float xhat = (xr[j + k] - m) * s;
        const float g = dyr[j + k] * w[j + k];
        dw[j + k] += dyr[j + k] * xhat;
        db[j + k] += dyr[j + k];
        acc_g[k] += g;
        acc_gx[k] += g * xhat;
      }
    float sum_g = 0, sum_gx = 0;
    for (int k = 0; k < 16; ++k) {
      sum_g += acc_g[k];
      sum_gx += acc_gx[k];
    }
    for (; j < dim; ++j) {
      const float xhat = (xr[j] - m) * s;
      const float g = dyr[j] * w[j];
      dw[j] += dyr[j] * xhat;
      db[j] += dyr[j];
      sum_g += g;
      sum_gx += g * xhat;
    }
    if (dx == nullptr) continue;
    const float mean_g = sum_g * inv_dim, mean_gx = sum_gx * inv_dim;
    float* dxr = dx + r * dim;
    for (j = 0; j < dim; ++j) dxr[j] = s * (dyr[j] * w[j] - mean_g - (xr[j] - m) * s * mean_gx);
  }
}

}  // namespace

LayerNorm::LayerNorm(int64_t dim, float eps) : dim_(dim), eps_(eps) {
  BRAID_CHECK(dim_ > 0, "LayerNorm(", dim_, "): size must be positive");
  BRAID_CHECK(eps_ >= 0, "LayerNorm(", dim_, "): eps must be >= 0, got ", eps_);
}

void LayerNorm::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  weight_ = params.declare(prefix + "weight", {dim_}, false);
  bias_ = params.declare(prefix + "bias", {dim_}, false);
}

void LayerNorm::init(Rng&) {
  Tensor w = params_->param(weight_);
  Tensor b = params_->param(bias_);
  for (int64_t i = 0; i < dim_; ++i) {
    w.f32()[i] = 1.0f;
    b.f32()[i] = 0.0f;
  }
}

Shape LayerNorm::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() >= 1 && in[-1] == dim_, "LayerNorm(", dim_, "): input shape ", in.str(),
              " does not end in ", dim_);
  return in;
}

std::unique_ptr<Cache> LayerNorm::make_cache() const { return std::make_unique<LayerNormCache>(); }

const Tensor& LayerNorm::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<LayerNormCache&>(cache);
  BRAID_CHECK(x.dtype() == DType::f32, "LayerNorm: input must be f32, got ", dtype_name(x.dtype()));
  const Shape out = output_shape(x.shape());
  const int64_t rows = x.numel() / dim_;
  c.x = x;
  c.mean.ensure({rows});
  c.rstd.ensure({rows});
  const float* w = params_->param(weight_).f32();
  const float* b = params_->param(bias_).f32();
  if (feeds_product_ && ctx.precision == Precision::bf16) {
    c.out.ensure(out, DType::bf16);
    write_rows_rounded(
        rows, dim_, c.block, c.out.data<BFloat16>(), [&](int64_t r, int64_t n, float* block) {
          fast_math::run_best<layernorm_forward>(x.f32() + r * dim_, w, b, block, c.mean.f32() + r,
                                                 c.rstd.f32() + r, n, dim_, eps_);
        });
    return c.out;
  }
  c.out.ensure(out);
  fast_math::run_best<layernorm_forward>(x.f32(), params_->param(weight_).f32(),
                                         params_->param(bias_).f32(), c.out.f32(), c.mean.f32(),
                                         c.rstd.f32(), rows, dim_, eps_);
  return c.out;
}

const Tensor& LayerNorm::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<LayerNormCache&>(cache);
  BRAID_CHECK(dy.shape() == c.x.shape(), "LayerNorm: backward got dy ", dy.shape().str(),
              " for input ", c.x.shape().str());
  const int64_t rows = dy.numel() / dim_;
  float* dx = nullptr;
  if (need_dx) {
    c.dx.ensure(c.x.shape(), DType::f32, MemCategory::activation_grads);
    dx = c.dx.f32();
  }
  fast_math::run_best<layernorm_backward>(c.x.f32(), params_->param(weight_).f32(), dy.f32(),
                                          c.mean.f32(), c.rstd.f32(), params_->grad(weight_).f32(),
                                          params_->grad(bias_).f32(), dx, rows, dim_);
  return need_dx ? c.dx : no_grad();
}

}  // namespace braid::nn
