// Cuts a batch into m interleaved micro-batches: micro-batch k holds rows k, k + m,
// k + 2m, ... Interleaving (not contiguous slices) is what makes accumulation and data
// parallelism the same computation: a distributed sampler gives rank r of N the global
// positions r, r + N, ..., so one process accumulating N micro-batches of the global
// batch sees exactly the rows each rank sees, and deterministic mode can match the two
// bit for bit.
//
// The slices are copies into tensors kept between steps: the steady state allocates
// nothing. Not thread-safe.
#pragma once

#include <vector>

#include "data/loader.h"

namespace braid::parallel {

class MicroBatches {
 public:
  // Fills the m slices of `batch`; its row count must be a multiple of m (an error naming
  // both otherwise). With m = 1 the batch itself is used, no copy.
  void split(const data::Batch& batch, int m);
  const data::Batch& operator[](int k) const { return m_ == 1 ? *whole_ : slices_[k]; }
  int size() const { return m_; }

 private:
  const data::Batch* whole_ = nullptr;
  std::vector<data::Batch> slices_;
  int m_ = 1;
};

}  // namespace braid::parallel
