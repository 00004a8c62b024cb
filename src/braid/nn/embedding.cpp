#include "nn/embedding.h"

#include <algorithm>

#include "core/kernels.h"

namespace braid::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim) : num_(num_embeddings), dim_(dim) {
  BRAID_CHECK(num_ > 0 && dim_ > 0, "Embedding(", num_, ", ", dim_, "): sizes must be positive");
}

void Embedding::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  weight_ = params.declare(prefix + "weight", {num_, dim_}, true);
}

void Embedding::init(Rng& rng) {
  Tensor w = params_->param(weight_);
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = rng.normal();
}

Shape Embedding::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() < Shape::kMaxDims, "Embedding(", num_, ", ", dim_, "): input shape ",
              in.str(), " has too many dimensions to append one (max ", Shape::kMaxDims, ")");
  // Appended by hand rather than through a vector: this runs every step and must not
  // touch the heap.
  switch (in.rank()) {
    case 0:
      return Shape{dim_};
    case 1:
      return Shape{in[0], dim_};
    case 2:
      return Shape{in[0], in[1], dim_};
    case 3:
      return Shape{in[0], in[1], in[2], dim_};
    case 4:
      return Shape{in[0], in[1], in[2], in[3], dim_};
    default:
      return Shape{in[0], in[1], in[2], in[3], in[4], dim_};
  }
}

const Tensor& Embedding::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  BRAID_CHECK(x.dtype() == DType::i32, "Embedding(", num_, ", ", dim_,
              "): input must hold i32 token ids, got ", dtype_name(x.dtype()));
  const Shape out_shape = output_shape(x.shape());
  const int32_t* ids = x.data<int32_t>();
  const int64_t n = x.numel();
  // Validate everything before writing, so a bad batch leaves no half-written output.
  for (int64_t i = 0; i < n; ++i)
    BRAID_CHECK(ids[i] >= 0 && ids[i] < num_, "Embedding(", num_, ", ", dim_, "): id ", ids[i],
                " at position ", i, " of input ", x.shape().str(), " is outside [0, ", num_,
                "); check the tokenizer's vocabulary size against the model's");
  cache.x = x;
  cache.out.ensure(out_shape);
  const float* w = params_->param(weight_).f32();
  float* y = cache.out.f32();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = w + static_cast<int64_t>(ids[i]) * dim_;
    std::copy(row, row + dim_, y + i * dim_);
  }
  return cache.out;
}

const Tensor& Embedding::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  BRAID_CHECK(!need_dx, "Embedding(", num_, ", ", dim_,
              "): backward asked for dL/dx, but embedding inputs are integer ids and have no "
              "gradient; call backward with need_dx = false (it must be the first layer)");
  const Tensor& ids_t = cache.x;
  BRAID_CHECK(dy.numel() == ids_t.numel() * dim_, "Embedding: backward got dy ", dy.shape().str(),
              " for ids ", ids_t.shape().str());
  const int32_t* ids = ids_t.data<int32_t>();
  float* dw = params_->grad(weight_).f32();
  const float* g = dy.f32();
  for (int64_t i = 0; i < ids_t.numel(); ++i)
    add_inplace(g + i * dim_, dw + static_cast<int64_t>(ids[i]) * dim_, dim_);
  return no_grad();
}

}  // namespace braid::nn
