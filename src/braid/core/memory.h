// 64-byte aligned memory with byte accounting by category (current and peak) and an
// allocation counter, so tests can prove the steady-state training step allocates
// nothing and `braid bench train` can report peak memory by category.
//
// The tracker is process-wide on purpose: it is a set of counters, like the allocator it
// watches, and threading a context through every allocation would buy nothing. It is
// thread-safe (atomics).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace braid {

enum class MemCategory : uint8_t {
  parameters,
  gradients,
  optimizer,
  activations,       // saved by forward for backward (and layers' outputs)
  activation_grads,  // dL/d(activation) buffers that backward writes, kept across steps
  workspace,
  data,
  other,
};
inline constexpr size_t kMemCategoryCount = 8;
std::string_view mem_category_name(MemCategory c);

// memcpy with non-temporal stores, for large copies that this core will not read back
// soon: it skips reading every destination line before writing it, which is a third of
// the memory traffic of a copy that misses the cache. Ordered (sfence) before it returns.
void copy_streaming(void* dst, const void* src, size_t bytes);

inline constexpr size_t kAlignment = 64;

struct MemoryCounters {
  std::array<int64_t, kMemCategoryCount> current{};
  std::array<int64_t, kMemCategoryCount> peak{};
  int64_t allocations = 0;  // total number of allocations made so far
};

class MemoryTracker {
 public:
  static MemoryTracker& process();
  void on_alloc(MemCategory c, size_t bytes);
  void on_free(MemCategory c, size_t bytes);
  MemoryCounters snapshot() const;
  int64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }
  // Peak := current, so a benchmark can measure the peak of one phase.
  void reset_peaks();

 private:
  std::array<std::atomic<int64_t>, kMemCategoryCount> current_{};
  std::array<std::atomic<int64_t>, kMemCategoryCount> peak_{};
  std::atomic<int64_t> allocations_{0};
};

// An owning, move-only, 64-byte aligned block of bytes, zero-filled on allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, MemCategory category);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemCategory category_ = MemCategory::other;
};

}  // namespace braid
