// Conv2d: shape checks, parameters, and the two algorithms' orchestration (conv2d.h).
#include "nn/conv2d.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "core/convert.h"
#include "core/gemm.h"
#include "core/gemm_bf16.h"
#include "core/kernels.h"
#include "core/log.h"
#include "core/timer.h"
#include "nn/conv_choice.h"

namespace braid::nn {
namespace {

class Conv2dCache : public Cache {
 public:
  ConvGeometry g;
  bool direct = false;
  Tensor cols;        // gemm and grouped: im2col of x, [B*OH*OW, taps]
  bool bf16 = false;  // gemm under Precision::bf16: cols_bf16 and the products in bf16
  Tensor cols_bf16;
  Tensor xpad;  // direct with padding: x with a zero border, [B, H+2p, W+2p, C]
};

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
               int64_t padding, bool bias)
    : Conv2d(in_channels, out_channels, kernel,
             Conv2dOptions{.stride = stride, .padding = padding, .bias = bias}) {}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel,
               const Conv2dOptions& options)
    : in_(in_channels),
      out_(out_channels),
      k_(kernel),
      stride_(options.stride),
      pad_(options.padding),
      dilation_(options.dilation),
      groups_(options.groups),
      has_bias_(options.bias) {
  BRAID_CHECK(in_ > 0 && out_ > 0 && k_ > 0 && stride_ > 0 && pad_ >= 0, describe(),
              ": channels, kernel and stride must be positive and padding non-negative");
  BRAID_CHECK(dilation_ > 0 && groups_ > 0, describe(), ": dilation and groups must be positive");
  BRAID_CHECK(in_ % groups_ == 0 && out_ % groups_ == 0, describe(), ": groups (", groups_,
              ") must divide both in_channels (", in_, ") and out_channels (", out_, ")");
}

std::string Conv2d::describe() const {
  std::string s = detail::concat("Conv2d(", in_, " -> ", out_, ", kernel ", k_, ", stride ",
                                 stride_, ", padding ", pad_);
  if (dilation_ != 1) s += detail::concat(", dilation ", dilation_);
  if (groups_ != 1) s += detail::concat(", groups ", groups_);
  return s + ")";
}

void Conv2d::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  weight_ = params.declare(prefix + "weight", {out_, in_ / groups_, k_, k_}, true);
  if (has_bias_) bias_ = params.declare(prefix + "bias", {out_}, false);
}

// PyTorch's default: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// with fan_in = (in/groups)*k*k, and the same bound for the bias.
void Conv2d::init(Rng& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_ / groups_ * k_ * k_));
  Tensor w = params_->param(weight_);
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = rng.uniform(-bound, bound);
  if (has_bias_) {
    Tensor b = params_->param(bias_);
    for (int64_t i = 0; i < b.numel(); ++i) b.f32()[i] = rng.uniform(-bound, bound);
  }
}

Shape Conv2d::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 4 && in[3] == in_, describe(), ": expects NHWC input [B, H, W, ", in_,
              "], got ", in.str());
  // The window a dilated kernel spans: k itself without dilation.
  const int64_t span = dilation_ * (k_ - 1) + 1;
  BRAID_CHECK(in[1] + 2 * pad_ >= span && in[2] + 2 * pad_ >= span, describe(), ": input ",
              in.str(), " is smaller than the ", k_, "x", k_, " kernel",
              dilation_ == 1
                  ? std::string()
                  : detail::concat(" dilated by ", dilation_, " (", span, "x", span, ")"),
              " (padded size ", in[1] + 2 * pad_, "x", in[2] + 2 * pad_,
              "); use a smaller kernel or more padding");
  return {in[0], (in[1] + 2 * pad_ - span) / stride_ + 1, (in[2] + 2 * pad_ - span) / stride_ + 1,
          out_};
}

ConvGeometry Conv2d::geometry(const Shape& in) const {
  const Shape out = output_shape(in);
  ConvGeometry g;
  g.B = in[0], g.H = in[1], g.W = in[2], g.C = in_;
  g.O = out_, g.k = k_, g.stride = stride_, g.pad = pad_;
  g.OH = out[1], g.OW = out[2];
  g.dilation = dilation_, g.groups = groups_;
  return g;
}

bool Conv2d::choose_direct(const ConvGeometry& g, const float* x, Precision precision) {
  if (algorithm_ != Algorithm::automatic) return algorithm_ == Algorithm::direct;
  if (conv_policy() != ConvPolicy::automatic) return conv_policy() == ConvPolicy::direct;
  if (const std::optional<ConvChoice> c = find_conv_choice(g, precision)) return c->direct;
  return find_or_choose_conv_choice(g, precision,
                                    [&] { return measure_algorithms(g, x, precision); })
      .direct;
}

// Forward plus weight gradient each way on the layer's own input and weights, into
// scratch (y stands in for dy: timing only), best of a few alternated rounds after one
// untimed round (first touch of the scratch, the GEMM choices of these shapes).
ConvChoice Conv2d::measure_algorithms(const ConvGeometry& g, const float* x, Precision precision) {
  const int64_t M = g.pixels(), T = g.taps();
  std::vector<float> y(static_cast<size_t>(M * g.O)), dwt(static_cast<size_t>(T * g.O)),
      cols(static_cast<size_t>(M * T)), xpad;
  if (pad_ > 0) xpad.resize(static_cast<size_t>(g.B * g.padded_h() * g.padded_w() * g.C));
  const float* wt = wt_.f32();
  // Under bf16 the gemm path as forward runs it: columns and weight rounded, bf16 products.
  std::vector<BFloat16> x16, cols16, wt16, y16;
  if (precision == Precision::bf16) {
    x16.resize(static_cast<size_t>(g.B * g.H * g.W * g.C));
    cols16.resize(cols.size());
    wt16.resize(static_cast<size_t>(T * g.O));
    y16.resize(y.size());
  }
  auto gemm = [&] {
    Stopwatch watch;
    if (precision == Precision::bf16) {
      f32_to_bf16(x, x16.data(), static_cast<int64_t>(x16.size()));
      im2col(g, x16.data(), cols16.data());
      f32_to_bf16(wt, wt16.data(), T * g.O);
      gemm_bf16(false, false, M, g.O, T, 1.0f, cols16.data(), wt16.data(), 0.0f, y.data());
      f32_to_bf16(y.data(), y16.data(), M * g.O);
      gemm_bf16(true, false, T, g.O, M, 1.0f, cols16.data(), y16.data(), 0.0f, dwt.data());
    } else {
      im2col(g, x, cols.data());
      sgemm(false, false, M, g.O, T, 1.0f, cols.data(), wt, 0.0f, y.data());
      sgemm(true, false, T, g.O, M, 1.0f, cols.data(), y.data(), 0.0f, dwt.data());
    }
    return watch.elapsed();
  };
  auto direct = [&] {
    Stopwatch watch;
    const float* xp = x;
    if (pad_ > 0) {
      pad_input(g, x, xpad.data());
      xp = xpad.data();
    }
    conv_direct_forward(g, xp, wt, nullptr, y.data());
    std::fill(dwt.begin(), dwt.end(), 0.0f);
    conv_direct_weight_grad(g, xp, y.data(), dwt.data(), nullptr);
    return watch.elapsed();
  };
  ConvChoice c;
  c.geometry = g;
  c.precision = precision;
  c.gemm_s = c.direct_s = std::numeric_limits<double>::infinity();
  gemm();
  direct();
  for (int round = 0; round < 3; ++round) {
    // Alternated, so neither always runs second on a warm cache.
    if (round % 2 == 0) c.gemm_s = std::min(c.gemm_s, gemm());
    c.direct_s = std::min(c.direct_s, direct());
    if (round % 2 == 1) c.gemm_s = std::min(c.gemm_s, gemm());
  }
  c.direct = c.direct_s < c.gemm_s;
  log_debug(describe(), " at ", nn::describe(g), precision == Precision::bf16 ? " bf16" : "",
            ": gemm ", c.gemm_s * 1e3, " ms, direct ", c.direct_s * 1e3, " ms -> ",
            c.direct ? "direct" : "gemm");
  return c;
}

std::unique_ptr<Cache> Conv2d::make_cache() const { return std::make_unique<Conv2dCache>(); }

void Conv2d::repack_weight() {
  const int64_t kk = k_ * k_;
  wt_.ensure({kk * in_, out_}, DType::f32, MemCategory::workspace);
  const float* w = params_->param(weight_).f32();
  float* wt = wt_.f32();
  // w[o, c, ky, kx] -> wt[(ky*k + kx)*in + c, o]
  for (int64_t o = 0; o < out_; ++o)
    for (int64_t c = 0; c < in_; ++c)
      for (int64_t s = 0; s < kk; ++s) wt[(s * in_ + c) * out_ + o] = w[(o * in_ + c) * kk + s];
}

const Tensor& Conv2d::forward(const Tensor& x, Cache& cache_base, const ForwardContext& ctx) {
  auto& cache = static_cast<Conv2dCache&>(cache_base);
  const ConvGeometry g = geometry(x.shape());
  cache.g = g;
  cache.x = x;
  cache.out.ensure({g.B, g.OH, g.OW, g.O});
  float* y = cache.out.f32();
  const float* bias = has_bias_ ? params_->param(bias_).f32() : nullptr;
  if (g.grouped()) {
    cache.direct = cache.bf16 = false;
    forward_grouped(g, x.f32(), bias, cache.cols, y);
    return cache.out;
  }
  repack_weight();
  cache.direct = choose_direct(g, x.f32(), ctx.precision);
  cache.bf16 = !cache.direct && ctx.precision == Precision::bf16;
  if (cache.direct) {
    const float* xp = x.f32();
    if (pad_ > 0) {
      cache.xpad.ensure({g.B, g.padded_h(), g.padded_w(), g.C}, DType::f32, MemCategory::workspace);
      pad_input(g, x.f32(), cache.xpad.f32());
      xp = cache.xpad.f32();
    }
    conv_direct_forward(g, xp, wt_.f32(), bias, y);
    return cache.out;
  }
  // y[M, O] = cols[M, T] wt[T, O] (+ bias broadcast first, GEMM with beta = 1).
  const int64_t M = g.pixels(), T = g.taps();
  if (bias)
    for (int64_t r = 0; r < M; ++r) std::copy(bias, bias + g.O, y + r * g.O);
  if (cache.bf16) {
    // The input rounded once, then columns straight in bf16: no fp32 columns at all.
    x_bf16_.ensure(x.shape(), DType::bf16, MemCategory::workspace);
    f32_to_bf16(x.f32(), x_bf16_.data<BFloat16>(), x.numel());
    cache.cols_bf16.ensure({M, T}, DType::bf16, MemCategory::activations);
    im2col(g, x_bf16_.data<BFloat16>(), cache.cols_bf16.data<BFloat16>());
    wt_bf16_.ensure({T, g.O}, DType::bf16, MemCategory::workspace);
    f32_to_bf16(wt_.f32(), wt_bf16_.data<BFloat16>(), T * g.O);
    gemm_bf16(false, false, M, g.O, T, 1.0f, cache.cols_bf16.data<BFloat16>(),
              wt_bf16_.data<BFloat16>(), bias ? 1.0f : 0.0f, y);
    return cache.out;
  }
  cache.cols.ensure({M, T}, DType::f32, MemCategory::workspace);
  im2col(g, x.f32(), cache.cols.f32());
  sgemm(false, false, M, g.O, T, 1.0f, cache.cols.f32(), wt_.f32(), bias ? 1.0f : 0.0f, y);
  return cache.out;
}

const Tensor& Conv2d::backward(const Tensor& dy, Cache& cache_base, bool need_dx) {
  auto& cache = static_cast<Conv2dCache&>(cache_base);
  const ConvGeometry& g = cache.g;
  BRAID_CHECK(dy.shape() == cache.out.shape(), describe(), ": backward got dy ", dy.shape().str(),
              ", forward produced ", cache.out.shape().str());
  if (g.grouped()) {
    if (!need_dx) {
      backward_grouped(g, cache.cols, dy.f32(), nullptr);
      return no_grad();
    }
    cache.dx.ensure(cache.x.shape(), DType::f32, MemCategory::activation_grads);
    backward_grouped(g, cache.cols, dy.f32(), cache.dx.f32());
    return cache.dx;
  }
  const int64_t M = g.pixels(), T = g.taps(), kk = k_ * k_;

  // dwt[T, O] = sum over pixels of columns x dy, in tap-major order.
  dwt_.ensure({T, g.O}, DType::f32, MemCategory::workspace);
  float* db = has_bias_ ? params_->grad(bias_).f32() : nullptr;
  if (cache.direct) {
    dwt_.zero();
    conv_direct_weight_grad(g, pad_ > 0 ? cache.xpad.f32() : cache.x.f32(), dy.f32(), dwt_.f32(),
                            db);
  } else if (cache.bf16) {
    dy_bf16_.ensure({M, g.O}, DType::bf16, MemCategory::workspace);
    f32_to_bf16(dy.f32(), dy_bf16_.data<BFloat16>(), M * g.O);
    gemm_bf16(true, false, T, g.O, M, 1.0f, cache.cols_bf16.data<BFloat16>(),
              dy_bf16_.data<BFloat16>(), 0.0f, dwt_.f32());
    if (db) sum_rows_into(dy.f32(), db, M, g.O);
  } else {
    sgemm(true, false, T, g.O, M, 1.0f, cache.cols.f32(), dy.f32(), 0.0f, dwt_.f32());
    if (db) sum_rows_into(dy.f32(), db, M, g.O);
  }
  // Back to PyTorch's layout: grad[o, c, ky, kx] += dwt[(ky*k + kx)*in + c, o].
  float* gw = params_->grad(weight_).f32();
  const float* dwt = dwt_.f32();
  for (int64_t o = 0; o < out_; ++o)
    for (int64_t c = 0; c < in_; ++c)
      for (int64_t s = 0; s < kk; ++s) gw[(o * in_ + c) * kk + s] += dwt[(s * in_ + c) * out_ + o];
  if (!need_dx) return no_grad();
  cache.dx.ensure(cache.x.shape(), DType::f32, MemCategory::activation_grads);

  // dcols[M, T] = dy[M, O] wt[T, O]^T, then scatter the columns back onto the pixels.
  repack_weight();
  dcols_.ensure({M, T}, DType::f32, MemCategory::workspace);
  if (cache.bf16)
    gemm_bf16(false, true, M, T, g.O, 1.0f, dy_bf16_.data<BFloat16>(), wt_bf16_.data<BFloat16>(),
              0.0f, dcols_.f32());
  else
    sgemm(false, true, M, T, g.O, 1.0f, dy.f32(), wt_.f32(), 0.0f, dcols_.f32());
  col2im(g, dcols_.f32(), cache.dx.f32());
  return cache.dx;
}

double Conv2d::forward_flops(const Shape& in) const {
  const Shape out = output_shape(in);
  return 2.0 * static_cast<double>(out[0] * out[1] * out[2]) * static_cast<double>(out_) *
         static_cast<double>(in_ / groups_ * k_ * k_);
}

}  // namespace braid::nn
