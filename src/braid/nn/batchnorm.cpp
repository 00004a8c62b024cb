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
//
// With a reducer (SyncBatchNorm), each rank sends its count, per-channel mean and M2 (sum
// of squared deviations from its own mean), all in double, in one allgather, and every
// rank merges them in rank order with the pairwise update of Chan, Golub and LeVeque
// (1979), as PyTorch's batch_norm_gather_stats_with_counts does:
//   delta = mean_b - mean_a, n = n_a + n_b,
//   mean = mean_a + delta * n_b / n,  M2 = M2_a + M2_b + delta^2 * n_a * n_b / n.
// Why not one allreduce of sum(x) and sum(x^2): E[x^2] - E[x]^2 cancels catastrophically
// when |mean| >> std, which the two-pass local variance avoids; two allreduces (the mean,
// then squared deviations from it) would be exact but cost a second round trip per layer.
// The merge never subtracts large squares, costs one call of N * (2C + 1) doubles (tiny
// next to a gradient allreduce), and with one rank returns that rank's moments unchanged,
// so a one-rank reducer is bitwise the local layer. Every rank merges the same gathered
// bits in the same order, so all get the same statistics.
// Backward sums sum(dy) and sum(dy * xhat) over ranks (one allreduce of 2C doubles) for
// dx only; the weight and bias gradients take the local sums.
#include "nn/batchnorm.h"

#include <algorithm>
#include <cmath>
#include <utility>

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
  // f64 [1 + ranks, 1 + 2C] (ranks: the reducer's size, 0 without one). Row 0: forward's
  // (count, mean[C], M2[C]), this rank's then merged; backward's sums (sum_dy[C],
  // sum_dy_xhat[C]). Rows 1..ranks: what the allgather brings, one row per rank.
  Tensor stats;
  double count = 0;  // rows the statistics were taken over, on all ranks together
};

// mean[c] and M2[c] (sum of squared deviations from the mean) over the rows of x[rows, C];
// zeros when there are no rows.
BRAID_MULTIVERSION void channel_moments(const float* x, int64_t rows, int64_t C, double* mean,
                                        double* m2) {
  if (rows == 0) {
    std::fill_n(mean, C, 0.0);
    std::fill_n(m2, C, 0.0);
    return;
  }
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
      mean[c0 + j] = m[j];
      m2[c0 + j] = q[j];
    }
  }
}

// Merges the gathered rows (count, mean[C], M2[C]) of `ranks` ranks into `out`, in rank
// order (Chan et al., see the top of this file). Empty ranks count for nothing.
void merge_moments(const double* gathered, int ranks, int64_t C, double* out) {
  const int64_t width = 1 + 2 * C;
  std::fill_n(out, width, 0.0);
  double* mean = out + 1;
  double* m2 = out + 1 + C;
  for (int r = 0; r < ranks; ++r) {
    const double* row = gathered + r * width;
    const double nb = row[0], na = out[0];
    if (nb == 0) continue;
    if (na == 0) {
      std::copy_n(row, width, out);
      continue;
    }
    const double n = na + nb;
    const double* mean_b = row + 1;
    const double* m2_b = row + 1 + C;
    for (int64_t c = 0; c < C; ++c) {
      const double delta = mean_b[c] - mean[c];
      mean[c] += delta * nb / n;
      m2[c] += m2_b[c] + delta * delta * na * nb / n;
    }
    out[0] = n;
  }
}

// sum_dy[c] = sum dy, sum_dy_xhat[c] = sum dy * (x - mean) * invstd.
BRAID_MULTIVERSION void channel_grad_sums(const float* dy, const float* x, const float* mean,
                                          const float* invstd, int64_t rows, int64_t C,
                                          double* sum_dy, double* sum_dy_xhat) {
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
      sum_dy[c0 + j] = a[j];
      sum_dy_xhat[c0 + j] = b[j] * invstd[c0 + j];
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

BatchNorm::BatchNorm(int64_t channels, int spatial_dims, std::shared_ptr<StatsReducer> reducer)
    : C_(channels), spatial_dims_(spatial_dims), reducer_(std::move(reducer)) {
  BRAID_CHECK(C_ > 0, kind(), "(", C_, "): the channel count must be positive");
  BRAID_CHECK(spatial_dims == 0 || spatial_dims == 2,
              "BatchNorm: spatial_dims must be 0 or 2, got ", spatial_dims);
  BRAID_CHECK(!reducer_ || reducer_->size() >= 1, kind(), "(", C_,
              "): a statistics reducer needs at least one rank, got ", reducer_->size());
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
  const int64_t C = C_, rows = x.numel() / C, width = 1 + 2 * C;
  const int ranks = reducer_ ? reducer_->size() : 0;
  cache.train = ctx.mode == Mode::train;
  cache.x = x;
  cache.out.ensure(x.shape());
  cache.coef.ensure({kCoefs, C}, DType::f32, MemCategory::workspace);
  cache.stats.ensure({1 + ranks, width}, DType::f64, MemCategory::workspace);
  auto row = [&](Coef k) { return cache.coef.f32() + k * C; };
  float *mean = row(kMean), *invstd = row(kInvStd), *scale = row(kScale);

  if (cache.train) {
    double* moments = cache.stats.data<double>();  // (count, mean[C], M2[C])
    moments[0] = static_cast<double>(rows);
    channel_moments(x.f32(), rows, C, moments + 1, moments + 1 + C);
    if (reducer_) {
      reducer_->allgather(moments, moments + width, static_cast<size_t>(width));
      merge_moments(moments + width, ranks, C, moments);
    }
    // Every rank sees the same merged count, so all of them throw here, none waits.
    const double n = moments[0];
    if (reducer_)
      BRAID_CHECK(n > 1, kind(), "(", C,
                  "): training needs more than one value per channel, got input ", x.shape().str(),
                  " here and ", static_cast<int64_t>(n), " rows on all ", ranks, " ranks together");
    BRAID_CHECK(n > 1, kind(), "(", C,
                "): training needs more than one value per channel, got input ", x.shape().str());
    cache.count = n;
    const double unbias = n / (n - 1);
    float *rm = running_mean_.f32(), *rv = running_var_.f32();
    for (int64_t c = 0; c < C; ++c) {
      mean[c] = static_cast<float>(moments[1 + c]);
      const float var = static_cast<float>(moments[1 + C + c] / n);  // biased
      invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + kEps));
      rm[c] = static_cast<float>((1 - kMomentum) * rm[c] + kMomentum * mean[c]);
      rv[c] = static_cast<float>((1 - kMomentum) * rv[c] + kMomentum * var * unbias);
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
  double* sums = cache.stats.data<double>();  // (sum_dy[C], sum_dy_xhat[C])
  channel_grad_sums(dy.f32(), cache.x.f32(), row(kMean), row(kInvStd), rows, C, sums, sums + C);
  float* dw = params_->grad(weight_).f32();
  float* db = params_->grad(bias_).f32();
  for (int64_t c = 0; c < C; ++c) {
    sum_dy[c] = static_cast<float>(sums[c]);
    sum_dy_xhat[c] = static_cast<float>(sums[C + c]);
    dw[c] += sum_dy_xhat[c];
    db[c] += sum_dy[c];
  }
  if (!need_dx) return no_grad();

  // In train mode dx depends on every rank's dy through the statistics; need_dx and the
  // mode are the same on every rank, so all of them make this call or none.
  double n = static_cast<double>(rows);
  if (cache.train && reducer_) {
    reducer_->sum(sums, static_cast<size_t>(2 * C));
    for (int64_t c = 0; c < C; ++c) {
      sum_dy[c] = static_cast<float>(sums[c]);
      sum_dy_xhat[c] = static_cast<float>(sums[C + c]);
    }
    n = cache.count;
  }

  // dx = scale*dy + kx*(x - mean) + k0; the batch terms vanish in eval mode, where mean and invstd
  // are constants.
  const float *mean = row(kMean), *invstd = row(kInvStd), *scale = row(kScale);
  float *kx = row(kDxX), *k0 = row(kDxConst);
  const double inv_n = 1.0 / n;
  for (int64_t c = 0; c < C; ++c) {
    if (!cache.train) {
      kx[c] = 0.0f, k0[c] = 0.0f;
      continue;
    }
    const double b = -static_cast<double>(scale[c]) * invstd[c] * sum_dy_xhat[c] * inv_n;
    kx[c] = static_cast<float>(b);
    k0[c] = static_cast<float>(-static_cast<double>(scale[c]) * sum_dy[c] * inv_n);
  }
  cache.dx.ensure(cache.x.shape(), DType::f32, MemCategory::activation_grads);
  channel_affine2(dy.f32(), cache.x.f32(), mean, scale, kx, k0, cache.dx.f32(), rows, C);
  return cache.dx;
}

}  // namespace braid::nn
