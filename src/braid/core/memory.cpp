#include "core/memory.h"

#include <emmintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace braid {

std::string_view mem_category_name(MemCategory c) {
  static constexpr std::string_view names[] = {
      "parameters",       "gradients", "optimizer", "activations",
      "activation_grads", "workspace", "data",      "other"};
  return names[static_cast<size_t>(c)];
}

void copy_streaming(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  // Stores need 16-byte alignment: copy the head plainly.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();
}

MemoryTracker& MemoryTracker::process() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::on_alloc(MemCategory c, size_t bytes) {
  const auto i = static_cast<size_t>(c);
  const int64_t now =
      current_[i].fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = peak_[i].load(std::memory_order_relaxed);
  while (now > peak && !peak_[i].compare_exchange_weak(peak, now)) {
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryTracker::on_free(MemCategory c, size_t bytes) {
  current_[static_cast<size_t>(c)].fetch_sub(static_cast<int64_t>(bytes));
}

MemoryCounters MemoryTracker::snapshot() const {
  MemoryCounters out;
  for (size_t i = 0; i < kMemCategoryCount; ++i) {
    out.current[i] = current_[i].load();
    out.peak[i] = peak_[i].load();
  }
  out.allocations = allocations_.load();
  return out;
}

void MemoryTracker::reset_peaks() {
  for (size_t i = 0; i < kMemCategoryCount; ++i) peak_[i].store(current_[i].load());
}

Buffer::Buffer(size_t bytes, MemCategory category) : bytes_(bytes), category_(category) {
  if (bytes == 0) return;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
  MemoryTracker::process().on_alloc(category, bytes);
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      category_(other.category_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
  }
  return *this;
}

void Buffer::release() {
  if (!data_) return;
  MemoryTracker::process().on_free(category_, bytes_);
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace braid
