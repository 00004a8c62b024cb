// Tensor: a contiguous, row-major view of typed memory on a device (CPU today).
//
// A Tensor either shares ownership of a Buffer (Tensor::empty) or is a non-owning view
// into memory someone else keeps alive (Tensor::view, e.g. a parameter inside the flat
// parameter buffer). Copying a Tensor copies the handle, not the data.
//
// Layers keep their outputs in caller-owned caches and call ensure() every step: it
// reshapes in place when the capacity suffices and allocates only when it does not, so
// the steady-state step allocates nothing.
//
// Image activations are NHWC (channels last) inside braid; Flatten emits PyTorch's
// C,H,W order so checkpoints match torch.nn modules.
#pragma once

#include <cstddef>
#include <memory>

#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/shape.h"

namespace braid {

enum class Device : uint8_t { cpu };

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled tensor owning its memory.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32,
                      MemCategory category = MemCategory::activations);
  // A non-owning view; `data` must outlive every copy of the returned Tensor.
  static Tensor view(void* data, const Shape& shape, DType dtype = DType::f32);

  // Makes this tensor have `shape` and `dtype`, reusing its memory when it is owned and
  // large enough, allocating otherwise. Contents are unspecified afterwards.
  void ensure(const Shape& shape, DType dtype = DType::f32,
              MemCategory category = MemCategory::activations);

  // Same memory, other shape (numel must match).
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) along dimension 0, as a view sharing ownership.
  Tensor slice_rows(int64_t begin, int64_t end) const;

  bool defined() const { return data_ != nullptr || shape_.rank() > 0; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank(); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return Device::cpu; }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    BRAID_CHECK(DTypeOf<T>::value == dtype_, "tensor holds ", dtype_name(dtype_), ", accessed as ",
                dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data_);
  }
  float* f32() const { return data<float>(); }

  void zero();
  // Copies contents from `src` (same numel and dtype).
  void copy_from(const Tensor& src);

 private:
  std::shared_ptr<Buffer> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace braid
