#include "nn/linear.h"

#include <algorithm>
#include <cmath>

#include "core/gemm.h"
#include "core/kernels.h"

namespace braid::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  BRAID_CHECK(in_ > 0 && out_ > 0, "Linear(", in_, ", ", out_, "): sizes must be positive");
}

void Linear::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  weight_ = params.declare(prefix + "weight", {out_, in_}, true);
  if (has_bias_) bias_ = params.declare(prefix + "bias", {out_}, false);
}

// PyTorch's default: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)) for the
// weight and the same bound for the bias.
void Linear::init(Rng& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_));
  Tensor w = params_->param(weight_);
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = rng.uniform(-bound, bound);
  if (has_bias_) {
    Tensor b = params_->param(bias_);
    for (int64_t i = 0; i < b.numel(); ++i) b.f32()[i] = rng.uniform(-bound, bound);
  }
}

Shape Linear::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() >= 1 && in[-1] == in_, "Linear(", in_, " -> ", out_, "): input shape ",
              in.str(), " does not end in ", in_);
  Shape out = in;
  out[-1] = out_;
  return out;
}

const Tensor& Linear::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  const int64_t rows = x.numel() / in_;
  cache.x = x;
  cache.out.ensure(output_shape(x.shape()));
  float* y = cache.out.f32();
  if (has_bias_) {
    // Broadcast the bias first and let the GEMM accumulate (beta = 1): one pass over y.
    const float* b = params_->param(bias_).f32();
    for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out_, y + r * out_);
  }
  sgemm(false, true, rows, out_, in_, 1.0f, x.f32(), params_->param(weight_).f32(),
        has_bias_ ? 1.0f : 0.0f, y);
  return cache.out;
}

const Tensor& Linear::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  const int64_t rows = dy.numel() / out_;
  // dW[out, in] (+)= dy^T[out, rows] x[rows, in]
  bool overwrite = false;
  float* dw = params_->grad_for_write(weight_, overwrite).f32();
  sgemm(true, false, out_, in_, rows, 1.0f, dy.f32(), cache.x.f32(), overwrite ? 0.0f : 1.0f, dw);
  if (has_bias_) sum_rows_into(dy.f32(), params_->grad(bias_).f32(), rows, out_);
  if (!need_dx) return no_grad();
  // dx[rows, in] = dy[rows, out] W[out, in]
  cache.dx.ensure(cache.x.shape());
  sgemm(false, false, rows, in_, out_, 1.0f, dy.f32(), params_->param(weight_).f32(), 0.0f,
        cache.dx.f32());
  return cache.dx;
}

double Linear::forward_flops(const Shape& in) const {
  return 2.0 * static_cast<double>(in.numel() / in_) * static_cast<double>(in_ * out_);
}

}  // namespace braid::nn
