#include "nn/linear.h"

#include <algorithm>
#include <cmath>

#include "core/gemm.h"
#include "core/kernels.h"

namespace braid::nn {
namespace {

class LinearCache : public Cache {
 public:
  Precision precision = Precision::fp32;
  Tensor x_rounded;  // bf16, fp16: the input rounded, for the weight gradient
};

}  // namespace

std::unique_ptr<Cache> Linear::make_cache() const { return std::make_unique<LinearCache>(); }

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

const Tensor& Linear::forward(const Tensor& x, Cache& cache_base, const ForwardContext& ctx) {
  auto& cache = static_cast<LinearCache&>(cache_base);
  const int64_t rows = x.numel() / in_;
  cache.x = x;
  cache.precision = ctx.precision;
  cache.out.ensure(output_shape(x.shape()));
  const float* bias = has_bias_ ? params_->param(bias_).f32() : nullptr;
  if (x.dtype() == DType::bf16) {  // rounded by its producer (rounded_output.h)
    BRAID_CHECK(ctx.precision == Precision::bf16, "Linear(", in_, " -> ", out_,
                "): a bf16 input is an operand already rounded for precision bf16, but this "
                "forward runs at another precision");
    product_.forward_rounded(x.data<BFloat16>(), params_->param(weight_).f32(), bias, rows, in_,
                             out_, cache.out.f32());
    return cache.out;
  }
  BRAID_CHECK(x.dtype() == DType::f32, "Linear(", in_, " -> ", out_, "): input must be f32, got ",
              dtype_name(x.dtype()));
  product_.forward(cache.precision, x.f32(), params_->param(weight_).f32(), bias, rows, in_, out_,
                   cache.out.f32(), cache.x_rounded);
  return cache.out;
}

const Tensor& Linear::backward(const Tensor& dy, Cache& cache_base, bool need_dx) {
  auto& cache = static_cast<LinearCache&>(cache_base);
  const int64_t rows = dy.numel() / out_;
  product_.take_dy(cache.precision, dy.f32(), rows, out_,
                   has_bias_ ? params_->grad(bias_).f32() : nullptr);
  // dW[out, in] (+)= dy^T[out, rows] x[rows, in]
  bool overwrite = false;
  float* dw = params_->grad_for_write(weight_, overwrite).f32();
  const bool rounded_input = cache.x.dtype() == DType::bf16;
  product_.weight_grad(cache.precision, dy.f32(), rounded_input ? nullptr : cache.x.f32(),
                       rounded_input ? cache.x : cache.x_rounded, rows, in_, out_, overwrite, dw);
  if (!need_dx) return no_grad();
  // dx[rows, in] = dy[rows, out] W[out, in]
  cache.dx.ensure(cache.x.shape(), DType::f32, MemCategory::activation_grads);
  product_.input_grad(cache.precision, dy.f32(), params_->param(weight_).f32(), rows, in_, out_,
                      cache.dx.f32());
  return cache.dx;
}

double Linear::forward_flops(const Shape& in) const {
  return 2.0 * static_cast<double>(in.numel() / in_) * static_cast<double>(in_ * out_);
}

}  // namespace braid::nn
