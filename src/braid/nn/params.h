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
// "This range is final" (docs/ARCHITECTURE.md, "Strategies", the seam's second contract):
// during backward, modules call mark_ready() as soon as the gradients of a run of
// parameters are final, and every listener hears of it as a range of the flat buffers.
// DDP starts a bucket's allreduce on it, the one-process strategy its fused optimizer
// update. Ranges tile the buffers: parameter i's range is [offset_i, offset_{i+1}),
// padding included, so adjacent ranges join without gaps. finish_backward() reports
// whatever no module did, so a listener sees every range exactly once per backward,
// whatever the model.
//
// Memory comes from an allocator, so a strategy can place the gradient buffer where its
// collectives are fastest (comm::allocate_shared, mapped by every rank on the host).
//
// Not thread-safe; declare and allocate from one thread before training starts.
#pragma once

#include <functional>
#include <memory>
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

// Memory for one flat buffer: its first float and whatever keeps it alive.
struct FlatMemory {
  float* data = nullptr;
  std::shared_ptr<void> owner;
};
// Returns zero-filled, 64-byte-aligned memory of `bytes` bytes for the buffer of
// `category` (MemCategory::parameters or MemCategory::gradients).
using FlatAllocator = std::function<FlatMemory(size_t bytes, MemCategory category)>;

// Hears that the gradients in [begin, end) (floats into the flat buffers) are final.
using ReadyListener = std::function<void(int64_t begin, int64_t end)>;
// Hears that forward is about to read the parameters in [begin, end) (floats).
using UseListener = std::function<void(int64_t begin, int64_t end)>;
// Where a parameter's gradient lives when it is not in a flat buffer (set_grad_locator).
using GradLocator = std::function<float*(size_t id)>;
// Where parameters live when not in a flat buffer (set_param_locator): `at` gives parameter
// id's memory; `flat` the whole flat buffer while one is materialized, else null.
struct ParamLocator {
  std::function<float*(size_t id)> at;
  std::function<float*()> flat;
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
  // Lays out and zero-fills the flat buffers, from `allocator` when given (else private
  // memory). Declaring after this is an error.
  void allocate(const FlatAllocator& allocator = nullptr);
  // Gradients kept outside the flat buffer (ZeRO stage 2's window of buckets): every
  // grad() and grad_for_write() asks `locator` where parameter id's gradient is, and no
  // flat gradient buffer is allocated: grads() is an error and grad_memory() null. Before
  // allocate().
  void set_grad_locator(GradLocator locator);
  // Parameters kept outside a flat buffer (ZeRO stage 3: each rank's shard, gathered a
  // bucket at a time): every param() asks `locator.at`, params() is `locator.flat()`
  // (null while no whole copy is materialized), and no flat parameter buffer is allocated.
  // Before allocate().
  void set_param_locator(ParamLocator locator);
  bool allocated() const { return frozen_; }

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

  float* params() const { return param_locator_.flat ? param_locator_.flat() : params_ptr_; }
  // The flat gradient buffer, exact: ranges no layer wrote since zero_grads() are zeroed
  // here first. Read it after backward; a pointer kept from before sees stale ranges.
  float* grads() const;
  // The same flat buffer, exact only over the parameters [first, end): for a caller that
  // reads those as soon as their layer's backward is done (an update fused into backward).
  float* grads(Id first, Id end) const;
  // The flat gradient buffer as it is in memory, with no fix-up: exact only over the
  // ranges reported final in this backward (mark_ready), for the listeners of those.
  float* grad_memory() const { return grads_ptr_; }
  int64_t size() const { return total_; }  // floats in each flat buffer, padding included
  int64_t count() const;                   // trainable scalars, padding excluded
  // Marks every gradient as zero without touching memory: the layers' first writes
  // overwrite instead of accumulate, which saves a pass over the whole buffer per step.
  void zero_grads();
  // The same for parameters [first, end) only.
  void zero_grads(Id first, Id end);

  // The range of the flat buffers that parameters [first, end) tile, padding included.
  int64_t range_begin(Id first) const;
  int64_t range_end(Id end) const;  // exclusive: parameter `end`'s offset, or size()

  // Listeners of "this range is final"; each hears every range once per backward, in the
  // order backward finishes them. Returns an id for remove_ready_listener.
  size_t add_ready_listener(ReadyListener listener);
  void remove_ready_listener(size_t id);
  // Brackets one backward whose ranges listeners hear of; outside it, mark_ready() does
  // nothing (a backward run for a test or a gradient check). Gradients still accumulate.
  void begin_backward();
  // Called by modules: the gradients of parameters [first, end) are final for this
  // backward. Makes them exact in memory (see grads()) and tells every listener. A
  // parameter reported twice in one backward is an error naming it.
  void mark_ready(Id first, Id end);
  // After backward: reports the parameters no module reported, last first.
  void finish_backward();

  // "Forward is about to read parameters [first, end)", the forward counterpart of
  // mark_ready(): a strategy whose parameters arrive while forward runs (a parameter
  // server's pull, ZeRO stage 3's gather) waits in its listener until the range is in
  // place, so the first layers compute while the last ones are still on the way.
  // Containers call it before each child's forward (Module::announces_use()). One
  // listener at a time; nullptr removes it.
  void set_use_listener(UseListener listener) { use_listener_ = std::move(listener); }
  void about_to_use(Id first, Id end) const {
    if (use_listener_ && first < end) use_listener_(range_begin(first), range_end(end));
  }

 private:
  std::vector<ParamInfo> layout_;
  std::vector<NamedBuffer> buffers_;
  float* grad_at(Id id) const;
  GradLocator grad_locator_;
  ParamLocator param_locator_;

  Buffer params_, grads_;
  // stale_[id]: the gradient is logically zero but its memory still holds an older value.
  mutable std::vector<uint8_t> stale_;
  std::vector<uint8_t> ready_;  // ready_[id]: reported final in this backward
  bool in_backward_ = false;    // between begin_backward() and finish_backward()
  std::vector<ReadyListener> listeners_;
  UseListener use_listener_;
  std::shared_ptr<void> params_owner_, grads_owner_;  // memory from an allocator
  float* params_ptr_ = nullptr;
  float* grads_ptr_ = nullptr;
  int64_t total_ = 0;
  bool frozen_ = false;
};

}  // namespace braid::nn
