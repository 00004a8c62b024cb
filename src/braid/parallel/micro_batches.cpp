#include "parallel/micro_batches.h"

#include <cstring>

namespace braid::parallel {
namespace {

// dst = rows k, k + m, ... of src.
void gather_rows(const Tensor& src, int k, int m, Tensor& dst) {
  const int64_t rows = src.dim(0) / m;
  std::vector<int64_t> dims(src.shape().rank());
  for (int i = 0; i < src.shape().rank(); ++i) dims[static_cast<size_t>(i)] = src.dim(i);
  dims[0] = rows;
  dst.ensure(Shape(dims), src.dtype(), MemCategory::data);
  const size_t row_bytes = src.nbytes() / static_cast<size_t>(src.dim(0));
  const auto* from = static_cast<const char*>(src.raw());
  auto* to = static_cast<char*>(dst.raw());
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(to + static_cast<size_t>(i) * row_bytes,
                from + static_cast<size_t>(k + i * m) * row_bytes, row_bytes);
}

}  // namespace

void MicroBatches::split(const data::Batch& batch, int m) {
  BRAID_CHECK(m >= 1, "accumulate_steps must be >= 1, got ", m);
  m_ = m;
  whole_ = &batch;
  if (m == 1) return;
  BRAID_CHECK(batch.size % m == 0, "a batch of ", batch.size,
              " rows cannot be cut into accumulate_steps = ", m,
              " equal micro-batches; choose a batch that is a multiple of ", m);
  slices_.resize(static_cast<size_t>(m));
  for (int k = 0; k < m; ++k) {
    data::Batch& s = slices_[static_cast<size_t>(k)];
    gather_rows(batch.inputs, k, m, s.inputs);
    gather_rows(batch.targets, k, m, s.targets);
    s.size = batch.size / m;
    s.index = batch.index;
  }
}

}  // namespace braid::parallel
