// BatchNorm (contract in batchnorm.h).
//
// Activations are [rows, C] with C contiguous, so every kernel walks rows and runs a
// vector loop over a block of up to 64 channels whose sums live in a double array on the
// stack (no allocation, no cancellation trouble for large batches). The variance is
// two-pass (sum of squared deviations from the mean), not E[x^2] - E[x]^2.
//
// Backward (train) uses the fused formula, with xhat = (x - mean) * invstd and n rows:
//   dx = weight * invstd * (dy - sum(dy)/n - xhat * sum(dy * xhat)/n)
// written as dx = a*dy + b*(x - mean) + c per channel so that it is one pass over the
// data. Subtracting the mean first (forward too) keeps precision when |mean| >> std.
#include "nn/batchnorm.h"

#include <algorithm>
#include <cmath>

#include "core/multiversion.h"

namespace braid::nn {
namespace {

constexpr int64_t kBlock = 64;  // channels per pass over the rows

// Per-channel coefficients, one row each of BatchNormCache::coef.
enum Coef : int64_t { kMean, kInvStd, kScale, kSumDy, kSumDyXhat, kDxX, kDxConst, kCoefs };

class BatchNormCache : public Cache {
 public:
  bool train = false;
  Tensor coef;  // [kCoefs, C]
};

// mean[c] and biased var[c] over the rows of x[rows, C].
BRAID_MULTIVERSION void channel_moments(const float* x, int64_t rows, int64_t C, float* mean,
                                        float* var) {
  for (int64_t c0 = 0; c0 < C; c0 += kBlock) {
    const int64_t n = std::min(kBlock, C - c0);
    double s[kBlock] = {}, m[kBlock], q[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * C + c0;
      for (int64_t j = 0; j < n; ++j) s[j] += xr[j];
    }
    for (int64_t j = 0; j < n; ++j) m[j] = s[j] / static_cast<double>(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * C + c0;
      for (int64_t j = 0; j < n; ++j) {
        const double d = xr[j] - m[j];
        q[j] += d * d;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      mean[c0 + j] = static_cast<float>(m[j]);
      var[c0 + j] = static_cast<float>(q[j] / static_cast<double>(rows));
    }
  }
}

// sum_dy[c] = sum dy, sum_dy_xhat[c] = sum dy * (x - mean) * invstd.
BRAID_MULTIVERSION void channel_grad_sums(const float* dy, const float* x, const float* mean,
                                          const float* invstd, int64_t rows, int64_t C,
                                          float* sum_dy, float* sum_dy_xhat) {
  for (int64_t c0 = 0; c0 < C; c0 += kBlock) {
    const int64_t n = std::min(kBlock, C - c0);
    double a[kBlock] = {}, b[kBlock] = {};
    const float* mu = mean + c0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* dr = dy + r * C + c0;
      const float* xr = x + r * C + c0;
      for (int64_t j = 0; j < n; ++j) {
        a[j] += dr[j];
        b[j] += static_cast<double>(dr[j]) * (xr[j] - mu[j]);
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      sum_dy[c0 + j] = static_cast<float>(a[j]);
      sum_dy_xhat[c0 + j] = static_cast<float>(b[j] * invstd[c0 + j]);
    }
  }
}

// y = (x - m[c]) * a[c] + b[c]
BRAID_MULTIVERSION void channel_affine(const float* x, const float* m, const float* a,
                                       const float* b, float* y, int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m[c]) * a[c] + b[c];
  }
}

// dx = dy * a[c] + (x - m[c]) * b[c] + k[c]
BRAID_MULTIVERSION void channel_affine2(const float* dy, const float* x, const float* m,
                                        const float* a, const float* b, const float* k, float* dx,
                                        int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* dr = dy + r * C;
    const float* xr = x + r * C;
    float* out = dx + r * C;
    for (int64_t c = 0; c < C; ++c) out[c] = dr[c] * a[c] + (xr[c] - m[c]) * b[c] + k[c];
  }
}

}  // namespace

BatchNorm::BatchNorm(int64_t channels, int spatial_dims)
    : C_(channels), spatial_dims_(spatial_dims) {
  BRAID_CHECK(C_ > 0, kind(), "(", C_, "): the channel count must be positive");
  BRAID_CHECK(spatial_dims == 0 || spatial_dims == 2,
              "BatchNorm: spatial_dims must be 0 or 2, got ", spatial_dims);
  running_mean_ = Tensor::empty({C_}, DType::f32, MemCategory::parameters);
  running_var_ = Tensor::empty({C_}, DType::f32, MemCategory::parameters);
  num_batches_tracked_ = Tensor::empty(Shape{}, DType::i64, MemCategory::parameters);
  Rng unused;
  init(unused);
}

std::string_view BatchNorm::kind() const {
  return spatial_dims_ == 0 ? "BatchNorm1d" : "BatchNorm2d";
}

void BatchNorm::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  weight_ = params.declare(prefix + "weight", {C_}, false);
  bias_ = params.declare(prefix + "bias", {C_}, false);
  params.declare_buffer(prefix + "running_mean", running_mean_);
  params.declare_buffer(prefix + "running_var", running_var_);
  params.declare_buffer(prefix + "num_batches_tracked", num_batches_tracked_);
}

void BatchNorm::init(Rng&) {
  if (params_ && params_->allocated()) {
    std::fill_n(params_->param(weight_).f32(), C_, 1.0f);
    std::fill_n(params_->param(bias_).f32(), C_, 0.0f);
  }
  std::fill_n(running_mean_.f32(), C_, 0.0f);
  std::fill_n(running_var_.f32(), C_, 1.0f);
  *num_batches_tracked_.data<int64_t>() = 0;
}

Shape BatchNorm::output_shape(const Shape& in) const {
  const int rank = spatial_dims_ + 2;
  BRAID_CHECK(in.rank() == rank && in[-1] == C_, kind(), "(", C_, "): expects input ",
              rank == 2 ? "[B, " : "[B, H, W, ", C_, "], got ", in.str());
  return in;
}

std::unique_ptr<Cache> BatchNorm::make_cache() const { return std::make_unique<BatchNormCache>(); }

const Tensor& BatchNorm::forward(const Tensor& x, Cache& cache_base, const ForwardContext& ctx) {
  auto& cache = static_cast<BatchNormCache&>(cache_base);
  output_shape(x.shape());
  const int64_t C = C_, rows = x.numel() / C;
  cache.train = ctx.mode == Mode::train;
  cache.x = x;
  cache.out.ensure(x.shape());
  cache.coef.ensure({kCoefs, C}, DType::f32, MemCategory::workspace);
  auto row = [&](Coef k) { return cache.coef.f32() + k * C; };
  float *mean = row(kMean), *invstd = row(kInvStd), *scale = row(kScale);

  if (cache.train) {
    BRAID_CHECK(rows > 1, kind(), "(", C,
                "): training needs more than one value per channel, got input ", x.shape().str());
    float* var = row(kSumDy);  // free until backward
    channel_moments(x.f32(), rows, C, mean, var);
    const double unbias = static_cast<double>(rows) / static_cast<double>(rows - 1);
    float *rm = running_mean_.f32(), *rv = running_var_.f32();
    for (int64_t c = 0; c < C; ++c) {
      invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + kEps));
      rm[c] = static_cast<float>((1 - kMomentum) * rm[c] + kMomentum * mean[c]);
      rv[c] = static_cast<float>((1 - kMomentum) * rv[c] + kMomentum * var[c] * unbias);
    }
    ++*num_batches_tracked_.data<int64_t>();
  } else {
    for (int64_t c = 0; c < C; ++c) {
      mean[c] = running_mean_.f32()[c];
      invstd[c] =
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var_.f32()[c]) + kEps));
    }
  }
  const float* w = params_->param(weight_).f32();
  const float* b = params_->param(bias_).f32();
  for (int64_t c = 0; c < C; ++c) scale[c] = w[c] * invstd[c];
  channel_affine(x.f32(), mean, scale, b, cache.out.f32(), rows, C);
  return cache.out;
}

const Tensor& BatchNorm::backward(const Tensor& dy, Cache& cache_base, bool need_dx) {
  auto& cache = static_cast<BatchNormCache&>(cache_base);
  BRAID_CHECK(dy.shape() == cache.out.shape(), kind(), ": backward got dy ", dy.shape().str(),
              ", forward produced ", cache.out.shape().str());
  const int64_t C = C_, rows = dy.numel() / C;
  auto row = [&](Coef k) { return cache.coef.f32() + k * C; };
  float *sum_dy = row(kSumDy), *sum_dy_xhat = row(kSumDyXhat);
  channel_grad_sums(dy.f32(), cache.x.f32(), row(kMean), row(kInvStd), rows, C, sum_dy,
                    sum_dy_xhat);
  float* dw = params_->grad(weight_).f32();
  float* db = params_->grad(bias_).f32();
  for (int64_t c = 0; c < C; ++c) {
    dw[c] += sum_dy_xhat[c];
    db[c] += sum_dy[c];
  }
  if (!need_dx) return no_grad();

  // dx = scale*dy + kx*(x - mean) + k0; the batch terms vanish in eval mode, where mean and invstd
  // are constants.
  const float *mean = row(kMean), *invstd = row(kInvStd), *scale = row(kScale);
  float *kx = row(kDxX), *k0 = row(kDxConst);
  const double inv_n = 1.0 / static_cast<double>(rows);
  for (int64_t c = 0; c < C; ++c) {
    if (!cache.train) {
      kx[c] = 0.0f, k0[c] = 0.0f;
      continue;
    }
    const double b = -static_cast<double>(scale[c]) * invstd[c] * sum_dy_xhat[c] * inv_n;
    kx[c] = static_cast<float>(b);
    k0[c] = static_cast<float>(-static_cast<double>(scale[c]) * sum_dy[c] * inv_n);
  }
  cache.dx.ensure(cache.x.shape());
  channel_affine2(dy.f32(), cache.x.f32(), mean, scale, kx, k0, cache.dx.f32(), rows, C);
  return cache.dx;
}

}  // namespace braid::nn
