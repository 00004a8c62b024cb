// Conv2d: 2-D convolution as torch.nn.Conv2d (square kernel, equal stride, zero
// padding and dilation on both axes, groups), on NHWC activations:
// x [B, H, W, in] -> y [B, OH, OW, out], OH = (H + 2*padding - dilation*(k-1) - 1) / stride + 1.
// Parameters keep PyTorch's layout so checkpoints match: weight [out, in/groups, k, k],
// bias [out]. groups divides in and out; group gi maps input channels
// [gi*in/G, (gi+1)*in/G) to output channels [gi*out/G, (gi+1)*out/G); groups == in is
// depthwise (out = in * multiplier).
//
// Two algorithms, same results up to rounding:
//  - gemm: im2col over the whole batch into the cache (cols [B*OH*OW, k*k*in]), then one
//    GEMM whose [B*OH*OW, out] result is the NHWC output itself. Backward: one GEMM for
//    the weight gradient, and for dx one GEMM into columns plus col2im.
//  - direct: a kernel vectorised over output channels (conv2d_kernels.h), made for few
//    input channels (a 1-channel first layer, where a K=9 GEMM wastes the machine); dx,
//    when asked for, still goes through col2im.
// Under Precision::bf16 the gemm path's three products take bf16 operands (columns,
// repacked weight and dy rounded; fp32 accumulation and outputs); the direct kernels stay
// fp32 (they serve layers too thin for a GEMM to matter).
// `automatic` takes the algorithm measured fastest for the geometry on this CPU
// (nn/conv_choice.h): single-threaded the direct kernels can win on wider layers too, but
// they do not scale with BLAS threads. set_algorithm forces one (tests, benchmarks).
//
// Columns are in tap order (ky, kx, c), not PyTorch's (c, ky, kx): in NHWC a window row
// is then one contiguous copy. The weight is repacked to match on every call, which is
// tiny next to the activations.
//
// Dilation > 1 or groups > 1 take a third path, grouped (conv2d_grouped.cpp): im2col with
// dilated sampling in group-major column order, then one GEMM per group on column blocks
// (leading dimensions, no copies), fp32 under either precision. It is correct for every
// case but not tuned: depthwise runs G GEMMs with K = k*k and N = the multiplier. A
// depthwise direct kernel, bf16 and a place in the timed choice (conv_choice.h, whose key
// has no dilation or groups) are left for later; dilation 1 and groups 1 never reach it.
//
// The cache keeps cols (gemm) or the padded input (direct, padding > 0) for backward.
// Scratch used only inside one call (the repacked weight, the column gradient) belongs
// to the module, so many caches in flight do not multiply it.
#pragma once

#include "nn/conv2d_kernels.h"
#include "nn/conv_choice.h"
#include "nn/module.h"

namespace braid::nn {

// torch.nn.Conv2d's keyword arguments after the kernel size.
struct Conv2dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  enum class Algorithm { automatic, gemm, direct };

  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0, bool bias = true);
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, const Conv2dOptions& options);

  std::string_view kind() const override { return "Conv2d"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override;

  // For tests and benchmarks: force one algorithm (default automatic). Ignored by a
  // dilated or grouped layer, which has one.
  void set_algorithm(Algorithm a) { algorithm_ = a; }

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t kernel() const { return k_; }
  int64_t dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  ParamSet::Id weight_id() const { return weight_; }

 private:
  // "Conv2d(1 -> 32, kernel 3, stride 1, padding 0)", then dilation and groups if not 1.
  std::string describe() const;
  ConvGeometry geometry(const Shape& in) const;
  // wt_[taps, out] = weight in tap-major order (see conv2d_kernels.h).
  void repack_weight();
  // Whether this forward runs the direct kernels: forced, or measured (conv_choice.h).
  bool choose_direct(const ConvGeometry& g, const float* x, Precision precision);
  ConvChoice measure_algorithms(const ConvGeometry& g, const float* x, Precision precision);
  // The grouped path (conv2d_grouped.cpp): wt_[G, kk*Cg, Og], group by group.
  void repack_weight_grouped();
  void forward_grouped(const ConvGeometry& g, const float* x, const float* bias, Tensor& cols,
                       float* y);
  void backward_grouped(const ConvGeometry& g, const Tensor& cols, const float* dy, float* dx);

  int64_t in_, out_, k_, stride_, pad_, dilation_ = 1, groups_ = 1;
  bool has_bias_;
  Algorithm algorithm_ = Algorithm::automatic;
  ParamSet* params_ = nullptr;
  ParamSet::Id weight_ = 0, bias_ = 0;
  Tensor wt_, dwt_, dcols_;            // per-call scratch (MemCategory::workspace)
  Tensor wt_bf16_, dy_bf16_, x_bf16_;  // the same under Precision::bf16
};

}  // namespace braid::nn
