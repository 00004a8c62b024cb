// TensorReducer: how a layer cut by width (tensor parallelism) combines its part of an
// activation with the ranks holding the other parts. nn/ knows nothing of communication;
// parallel/group_tensor_reducer.h implements this over a comm::Group.
//
// Contract: every call is collective (every rank of the reducer, same order, same count)
// and leaves bitwise identical results on every rank, so the replicated layers between
// the cut ones (LayerNorm, residual adds) compute the same values everywhere and their
// parameters' gradients agree without being exchanged.
#pragma once

#include <cstddef>

namespace braid::nn {

class TensorReducer {
 public:
  virtual ~TensorReducer() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = the sum over ranks of data[i], in place.
  virtual void sum(float* data, size_t count) = 0;
  // data[i] = the largest over ranks of data[i], in place.
  virtual void max(float* data, size_t count) = 0;
};

}  // namespace braid::nn
