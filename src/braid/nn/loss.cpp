#include "nn/loss.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/kernels.h"
#include "core/multiversion.h"
#include "nn/tensor_reducer.h"

namespace braid::nn {
namespace {

constexpr int32_t kIgnoreLabel = -1;

// exp(x) for x <= 0, vectorisable: std::exp is a scalar libm call (GCC vectorises it only
// under -ffast-math) and dominates the loss for large vocabularies. Cephes' expf:
// exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln(2)/2, exp(r) by a polynomial;
// relative error below 1e-7 (checked against double exp over [-87, 0]). Below -87, where 2^n would
// leave the normal range, the result is 0 (-inf included); NaN stays NaN. The clamp and the special
// cases are integer operations on the bits of |x| because a float compare-and-select may trap under
// GCC's default -ftrapping-math, which stops the loop from being vectorised.
inline float exp_nonpositive(float x) {
  constexpr uint32_t k87 = 0x42AE0000u;   // bits of 87.0f
  constexpr uint32_t kInf = 0x7F800000u;  // bits of +inf; NaNs are above it
  constexpr float kMagic = 12582912.0f;   // 1.5 * 2^23: adding it rounds to an integer
  const uint32_t a = std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu;  // |x| = -x
  const float xc = -std::bit_cast<float>(std::min(a, k87));
  const float n = (xc * 1.44269504088896341f + kMagic) - kMagic;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const uint32_t underflow = -static_cast<uint32_t>(a > k87);
  const uint32_t nan = -static_cast<uint32_t>(a > kInf) & 0x7FC00000u;
  return std::bit_cast<float>((std::bit_cast<uint32_t>(p * two_n) & ~underflow) | nan);
}

// The row maximum through integer keys that order like the floats (a float max-select
// does not vectorise under -ftrapping-math; an integer max does). A NaN with the sign bit
// clear wins and propagates; either way a NaN logit makes the row's loss NaN.
BRAID_MULTIVERSION float row_max(const float* x, int64_t n) {
  int32_t m = std::numeric_limits<int32_t>::min();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = std::bit_cast<int32_t>(x[i]);
    m = std::max(m, b ^ ((b >> 31) & 0x7FFFFFFF));
  }
  return std::bit_cast<float>(m ^ ((m >> 31) & 0x7FFFFFFF));
}

// e[j] = exp(x[j] - m) for a row whose maximum is m; returns sum_j e[j] in double (16
// partial sums: vectorisable without -ffast-math, same result on every instruction set).
BRAID_MULTIVERSION double exp_shifted(const float* x, float m, float* e, int64_t n) {
  for (int64_t j = 0; j < n; ++j) e[j] = exp_nonpositive(x[j] - m);
  double acc[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; ++k) acc[k] += e[j + k];
  double s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  for (; j < n; ++j) s += e[j];
  return s;
}

// d[j] = a d[j] + b.
BRAID_MULTIVERSION void scale_shift(float a, float b, float* d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) d[j] = a * d[j] + b;
}

// One row's loss against the smoothed target t = (1 - eps) onehot + eps / C:
//   -sum_j t_j log softmax_j = log(sum_j exp(x_j - m)) - sum_j t_j (x_j - m),
// with m = max_j x_j: every exponent is <= 0, so nothing overflows. When d is not null it
// receives grad * (softmax - t); otherwise a stack block holds the exponentials.
double row_cross_entropy(const float* x, int64_t classes, int32_t label, float m, float eps,
                         float* d, float grad) {
  double target = (1.0 - eps) * (static_cast<double>(x[label]) - m);
  if (eps > 0)
    target += eps * (static_cast<double>(sum(x, classes)) / static_cast<double>(classes) - m);
  double s = 0;
  if (d) {
    s = exp_shifted(x, m, d, classes);
    scale_shift(static_cast<float>(grad / s), -grad * eps / static_cast<float>(classes), d,
                classes);
    d[label] -= grad * (1.0f - eps);
  } else {
    constexpr int64_t kBlock = 1024;
    float e[kBlock];
    for (int64_t j = 0; j < classes; j += kBlock)
      s += exp_shifted(x + j, m, e, std::min(kBlock, classes - j));
  }
  return std::log(s) - target;
}

// The first maximum is the argmax (torch's convention), so a tie counts as correct only
// when no earlier class holds the same maximum.
bool is_argmax(const float* x, int32_t label, float m) {
  return x[label] == m && std::find(x, x + label, m) == x + label;
}

// The rows whose label counts (not -1); a label outside [0, classes) is an error naming it.
int64_t counted_labels(const int32_t* y, int64_t rows, int64_t classes) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (y[r] == kIgnoreLabel) continue;
    BRAID_CHECK(y[r] >= 0 && y[r] < classes, "softmax_cross_entropy: label ", y[r], " in row ", r,
                " is outside [0, ", classes, ") (C = ", classes, "; -1 marks an ignored row)");
    ++count;
  }
  return count;
}

}  // namespace

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                 const CrossEntropyOptions& options) {
  const float eps = options.label_smoothing;
  BRAID_CHECK(eps >= 0.0f && eps < 1.0f,
              "softmax_cross_entropy: label smoothing must be in [0, 1), got ", eps);
  BRAID_CHECK(logits.dtype() == DType::f32 && logits.rank() >= 2 && logits.shape()[-1] > 0,
              "softmax_cross_entropy: logits must be f32 [..., C] with rank >= 2 and C > 0, got ",
              dtype_name(logits.dtype()), " ", logits.shape().str());
  const int64_t classes = logits.shape()[-1];
  const int64_t rows = logits.numel() / classes;
  BRAID_CHECK(labels.dtype() == DType::i32, "softmax_cross_entropy: labels must be i32, got ",
              dtype_name(labels.dtype()), " ", labels.shape().str());
  BRAID_CHECK(labels.numel() == rows, "softmax_cross_entropy: labels ", labels.shape().str(),
              " hold ", labels.numel(), " values but logits ", logits.shape().str(), " have ", rows,
              " rows");

  // Validate and count first, so a bad label throws before dlogits is touched and the
  // gradient's 1/count is known in the single pass below.
  const int32_t* y = labels.data<int32_t>();
  LossResult result;
  result.count = counted_labels(y, rows, classes);

  float* d = nullptr;
  if (dlogits) {
    dlogits->ensure(logits.shape(), DType::f32, MemCategory::activation_grads);
    d = dlogits->f32();
  }
  const float grad = result.count ? options.grad_scale / static_cast<float>(result.count) : 0.0f;
  const float* x = logits.f32();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * classes;
    float* dr = d ? d + r * classes : nullptr;
    if (y[r] == kIgnoreLabel) {
      if (dr) fill(0.0f, dr, classes);
      continue;
    }
    const float m = row_max(xr, classes);
    total += row_cross_entropy(xr, classes, y[r], m, eps, dr, grad);
    if (is_argmax(xr, y[r], m)) ++result.correct;
  }
  result.loss = result.count ? total / static_cast<double>(result.count) : 0.0;
  return result;
}

LossResult vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& labels,
                                        int64_t first_class, int64_t classes,
                                        TensorReducer& reducer, Tensor* dlogits, Tensor& work,
                                        const CrossEntropyOptions& options) {
  BRAID_CHECK(options.label_smoothing == 0.0f,
              "vocabulary-parallel cross-entropy: label smoothing is not built; drop "
              "label_smoothing under tensor parallelism");
  BRAID_CHECK(logits.dtype() == DType::f32 && logits.rank() >= 2 && logits.shape()[-1] > 0,
              "vocab_parallel_cross_entropy: logits must be f32 [..., C] with rank >= 2, got ",
              dtype_name(logits.dtype()), " ", logits.shape().str());
  const int64_t local = logits.shape()[-1];
  const int64_t rows = logits.numel() / local;
  BRAID_CHECK(labels.dtype() == DType::i32 && labels.numel() == rows,
              "vocab_parallel_cross_entropy: labels ", labels.shape().str(), " for logits ",
              logits.shape().str());
  const int32_t* y = labels.data<int32_t>();
  LossResult result;
  result.count = counted_labels(y, rows, classes);
  work.ensure({4 * rows}, DType::f32, MemCategory::workspace);
  float* maxes = work.f32();
  float* sums = maxes + rows;  // then the label's logit, then the argmax hits: one sum
  float* picked = sums + rows;
  float* hits = picked + rows;
  const float* x = logits.f32();
  for (int64_t r = 0; r < rows; ++r) maxes[r] = row_max(x + r * local, local);
  reducer.max(maxes, static_cast<size_t>(rows));
  float* d = nullptr;
  if (dlogits) {
    dlogits->ensure(logits.shape(), DType::f32, MemCategory::activation_grads);
    d = dlogits->f32();
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * local;
    const int64_t at = y[r] - first_class;  // the label's column here, if this rank holds it
    const bool here = y[r] != kIgnoreLabel && at >= 0 && at < local;
    double s = 0;
    if (d) {
      s = exp_shifted(xr, maxes[r], d + r * local, local);
    } else {
      constexpr int64_t kBlock = 1024;
      float e[kBlock];
      for (int64_t j = 0; j < local; j += kBlock)
        s += exp_shifted(xr + j, maxes[r], e, std::min(kBlock, local - j));
    }
    sums[r] = static_cast<float>(s);
    picked[r] = here ? xr[at] : 0.0f;
    hits[r] = here && xr[at] == maxes[r] ? 1.0f : 0.0f;
  }
  reducer.sum(sums, static_cast<size_t>(3 * rows));
  const float grad = result.count ? options.grad_scale / static_cast<float>(result.count) : 0.0f;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float* dr = d ? d + r * local : nullptr;
    if (y[r] == kIgnoreLabel) {
      if (dr) fill(0.0f, dr, local);
      continue;
    }
    total += std::log(static_cast<double>(sums[r])) -
             (static_cast<double>(picked[r]) - static_cast<double>(maxes[r]));
    result.correct += hits[r] > 0 ? 1 : 0;
    if (!dr) continue;
    scale_shift(grad / sums[r], 0.0f, dr, local);
    const int64_t at = y[r] - first_class;
    if (at >= 0 && at < local) dr[at] -= grad;
  }
  result.loss = result.count ? total / static_cast<double>(result.count) : 0.0;
  return result;
}

namespace {

// Returns sum (p - t)^2 in double (eight partial sums: vectorisable without -ffast-math,
// and the same result on every instruction set); writes c * (p - t) into d when not null.
BRAID_MULTIVERSION double squared_error(const float* p, const float* t, float c, float* d,
                                        int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double diff = static_cast<double>(p[i + k]) - t[i + k];
      acc[k] += diff * diff;
    }
  double s = 0;
  for (int k = 0; k < 8; ++k) s += acc[k];
  for (; i < n; ++i) {
    const double diff = static_cast<double>(p[i]) - t[i];
    s += diff * diff;
  }
  if (d)
    for (i = 0; i < n; ++i) d[i] = c * (p[i] - t[i]);
  return s;
}

}  // namespace

double mse_loss(const Tensor& pred, const Tensor& target, Tensor* dpred, float grad_scale) {
  BRAID_CHECK(pred.dtype() == DType::f32 && target.dtype() == DType::f32,
              "mse_loss: pred and target must be f32, got ", dtype_name(pred.dtype()), " ",
              pred.shape().str(), " and ", dtype_name(target.dtype()), " ", target.shape().str());
  BRAID_CHECK(pred.shape() == target.shape(), "mse_loss: pred shape ", pred.shape().str(),
              " differs from target shape ", target.shape().str(),
              " (no broadcasting: reshape one of them)");
  const int64_t n = pred.numel();
  float* d = nullptr;
  if (dpred) {
    dpred->ensure(pred.shape(), DType::f32, MemCategory::activation_grads);
    d = dpred->f32();
  }
  const float c = n ? 2.0f * grad_scale / static_cast<float>(n) : 0.0f;
  const double s = squared_error(pred.f32(), target.f32(), c, d, n);
  return n ? s / static_cast<double>(n) : 0.0;
}

}  // namespace braid::nn
