#include "core/tensor.h"

#include <cstring>

namespace braid {

Tensor Tensor::empty(const Shape& shape, DType dtype, MemCategory category) {
  Tensor t;
  t.storage_ =
      std::make_shared<Buffer>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), category);
  t.data_ = t.storage_->data();
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::view(void* data, const Shape& shape, DType dtype) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

void Tensor::ensure(const Shape& shape, DType dtype, MemCategory category) {
  const size_t need = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (storage_ && storage_->bytes() >= need && data_ == storage_->data()) {
    shape_ = shape;
    dtype_ = dtype;
    return;
  }
  *this = empty(shape, dtype, category);
}

Tensor Tensor::reshape(const Shape& shape) const {
  BRAID_CHECK_EQ(shape.numel(), numel(), "reshape ", shape_.str(), " to ", shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  BRAID_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice_rows(", begin,
              ", ", end, ") of ", shape_.str());
  Tensor t = *this;
  const size_t row_bytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin) * row_bytes;
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::zero() {
  if (data_) std::memset(data_, 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  BRAID_CHECK(src.numel() == numel() && src.dtype() == dtype_, "copy ", src.shape().str(), " ",
              dtype_name(src.dtype()), " into ", shape_.str(), " ", dtype_name(dtype_));
  if (nbytes()) std::memmove(data_, src.raw(), nbytes());
}

}  // namespace braid
