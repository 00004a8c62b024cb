// The flat parameter and gradient buffers and the layout table that names their ranges.
//
// Modules declare their parameters (name, shape, weight decay or not) once; allocate()
// then lays them out back to back, each starting on a 64-byte boundary, in one fp32
// parameter buffer and one fp32 gradient buffer of the same layout. Layers keep only the
// ids and read views through param()/grad(), so every strategy above (a DDP bucket, a
// ZeRO shard, a checkpoint) is arithmetic on offsets into the same two buffers.
//
// Non-trainable state that belongs in a checkpoint (BatchNorm's running statistics) is
// registered as a named buffer: a Tensor the module owns and shares with this set.
//
// Not thread-safe; declare and allocate from one thread before training starts.
#pragma once

#include <string>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"

namespace braid::nn {

struct ParamInfo {
  std::string name;  // PyTorch state_dict name, e.g. "0.weight"
  Shape shape;
  int64_t offset = 0;  // in floats, from the start of the flat buffers
  bool decay = true;   // weight decay applies (false for biases and normalisation scales)
  int64_t numel() const { return shape.numel(); }
};

struct NamedBuffer {
  std::string name;  // e.g. "1.running_mean"
  Tensor value;
};

class ParamSet {
 public:
  using Id = size_t;
  static constexpr int64_t kAlignFloats = kAlignment / sizeof(float);

  ParamSet() = default;
  ParamSet(const ParamSet&) = delete;
  ParamSet& operator=(const ParamSet&) = delete;

  Id declare(std::string name, Shape shape, bool decay);
  void declare_buffer(std::string name, Tensor value);
  // Lays out and zero-fills the flat buffers. Declaring after this is an error.
  void allocate();
  bool allocated() const { return params_.data() != nullptr || total_ == 0; }

  Tensor param(Id id) const;
  // A gradient for accumulation (+=). The first access after zero_grads() zeroes it.
  Tensor grad(Id id) const;
  // A gradient that the caller will write whole, with overwrite = true when it must be
  // overwritten (the first write since zero_grads(): a GEMM with beta = 0) and false when
  // it must be accumulated into (a parameter used twice, as a tied embedding).
  Tensor grad_for_write(Id id, bool& overwrite) const;
  const ParamInfo& info(Id id) const { return layout_[id]; }
  const std::vector<ParamInfo>& layout() const { return layout_; }
  const std::vector<NamedBuffer>& buffers() const { return buffers_; }
  // Index into layout() by name, or -1.
  int64_t find(const std::string& name) const;

  float* params() const { return static_cast<float*>(params_.data()); }
  // The flat gradient buffer, exact: ranges no layer wrote since zero_grads() are zeroed
  // here first. Read it after backward; a pointer kept from before sees stale ranges.
  float* grads() const;
  // The same flat buffer, exact only over the parameters [first, end): for a caller that
  // reads those as soon as their layer's backward is done (an update fused into backward).
  float* grads(Id first, Id end) const;
  int64_t size() const { return total_; }  // floats in each flat buffer, padding included
  int64_t count() const;                   // trainable scalars, padding excluded
  // Marks every gradient as zero without touching memory: the layers' first writes
  // overwrite instead of accumulate, which saves a pass over the whole buffer per step.
  void zero_grads();

 private:
  std::vector<ParamInfo> layout_;
  std::vector<NamedBuffer> buffers_;
  float* grad_data() const { return static_cast<float*>(grads_.data()); }

  Buffer params_, grads_;
  // stale_[id]: the gradient is logically zero but its memory still holds an older value.
  mutable std::vector<uint8_t> stale_;
  int64_t total_ = 0;
  bool frozen_ = false;
};

}  // namespace braid::nn
