// The shared-memory pieces of the shm transport: a single-producer single-consumer byte
// ring, the doorbell (a futex word) a rank sleeps on while it waits, and the /dev/shm
// segment holding one rank's doorbell and all its inbound rings.
//
// How a ring works: head and tail count bytes since the ring was made and only grow; the
// producer owns head and the consumer tail, each on its own cache line, and each side keeps
// a private copy of the other's counter, re-reading the shared one only when its copy says
// the ring is full (or empty). Both move in multiples of kRingAlign, so a frame header
// never straddles the end of the data area and every payload piece starts aligned for any
// dtype. Bytes become visible to the consumer only at publish(), so a producer can write a
// header and a small payload and publish them with one store.
//
// Thread/process safety: one producer and one consumer per ring, in any two processes (or
// threads) that map the segment; the atomics are lock-free and address-free.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace braid::comm::shm {

inline constexpr size_t kRingAlign = 64;
inline constexpr size_t kPageBytes = 4096;
inline constexpr uint64_t kSegmentMagic = 0x3147455344494152ULL;  // "RAIDSEG1"
inline constexpr uint32_t kSegmentVersion = 1;
// Marks "the rest of the data area is unused; continue at its start" (see rewind_if_empty).
// Distinct from kFrameMagic, so it never reads as a frame.
inline constexpr uint32_t kRingSkip = 0x50494b53;  // "SKIP"

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head{0};  // written by the producer
  alignas(64) std::atomic<uint64_t> tail{0};  // written by the consumer
  // A restarted process's rings start unattached: the producer sets this once it has
  // mapped the newcomer's segment and published its own (Transport::accept_rejoin), and
  // the newcomer then maps it back.
  alignas(64) std::atomic<uint32_t> attached{0};
};
static_assert(sizeof(RingHeader) <= kPageBytes);

// A rank's futex word. Peers ring it after giving the rank something to do (data in one of
// its rings, space in a ring it writes, a peer closing); a ring costs one load unless the
// owner has announced that it sleeps.
struct Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleeping{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<uint64_t>::is_always_lock_free);

// Wakes the doorbell's owner if it sleeps. Call after publishing what it waits for.
void ring(Doorbell& d);
// The owner sleeps until rung or `timeout` passes. It announces itself first and then
// calls `ready()` once: when that reports work, it does not sleep; a ring that lands
// between that check and the sleep is never lost.
template <typename Ready>
void sleep_until_rung(Doorbell& d, Ready&& ready, std::chrono::nanoseconds timeout);
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout);

// The first page of every rank's segment.
struct SegmentHeader {
  uint64_t magic = kSegmentMagic;
  uint32_t version = kSegmentVersion;
  int32_t rank = 0;
  int32_t size = 0;
  int32_t pid = 0;
  uint64_t ring_bytes = 0;
  alignas(64) Doorbell doorbell;
  alignas(64) std::atomic<uint32_t> closed{0};  // set when the owner shuts down cleanly
};

// Where things are in rank `rank`'s segment: the header page, then for every other rank a
// page with its RingHeader followed by `ring_bytes` of data.
struct SegmentLayout {
  size_t ring_bytes = 0;
  int rank = 0;
  int size = 1;
  size_t ring_offset(int sender) const {  // of the ring's header page
    const size_t index = static_cast<size_t>(sender < rank ? sender : sender - 1);
    return kPageBytes + index * ring_stride();
  }
  size_t ring_stride() const { return kPageBytes + ring_bytes; }
  size_t total() const { return kPageBytes + static_cast<size_t>(size - 1) * ring_stride(); }
};

class Producer {
 public:
  Producer() = default;
  Producer(RingHeader* header, uint8_t* data, uint64_t capacity)
      : header_(header), data_(data), capacity_(capacity) {}

  // Free contiguous bytes at the write position, at most `max` (a multiple of kRingAlign
  // unless `max` is not); empty when the ring is full.
  std::span<uint8_t> reserve(size_t max) {
    uint64_t free = capacity_ - (head_ - tail_);
    if (free < max) {
      tail_ = header_->tail.load(std::memory_order_acquire);
      free = capacity_ - (head_ - tail_);
    }
    const uint64_t at = head_ % capacity_;
    const uint64_t n = std::min<uint64_t>({free, capacity_ - at, max});
    return {data_ + at, static_cast<size_t>(n)};
  }
  void advance(size_t n) { head_ += n; }  // n a multiple of kRingAlign
  // Call between records. When the consumer has taken everything, the next record starts
  // at the beginning of the data area again (behind a skip marker), so a ring that carries
  // one message at a time keeps reusing the same cache-resident bytes instead of sweeping
  // its whole capacity through memory.
  void rewind_if_empty() {
    const uint64_t at = head_ % capacity_;
    if (at == 0) return;
    tail_ = header_->tail.load(std::memory_order_acquire);
    if (tail_ != head_) return;
    std::memcpy(data_ + at, &kRingSkip, sizeof(kRingSkip));
    head_ += capacity_ - at;
  }
  // Makes the advanced bytes visible; true when there was something new.
  bool publish() {
    if (head_ == published_) return false;
    header_->head.store(head_, std::memory_order_release);
    published_ = head_;
    return true;
  }

 private:
  RingHeader* header_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;
  uint64_t published_ = 0;
  uint64_t tail_ = 0;  // the consumer's, as last read
};

class Consumer {
 public:
  Consumer() = default;
  Consumer(RingHeader* header, uint8_t* data, uint64_t capacity)
      : header_(header), data_(data), capacity_(capacity) {}

  // Readable contiguous bytes at the read position, at most `max`.
  std::span<const uint8_t> peek(size_t max) {
    uint64_t ready = head_ - tail_;
    if (ready < max) {
      head_ = header_->head.load(std::memory_order_acquire);
      ready = head_ - tail_;
    }
    const uint64_t at = tail_ % capacity_;
    const uint64_t n = std::min<uint64_t>({ready, capacity_ - at, max});
    return {data_ + at, static_cast<size_t>(n)};
  }
  void advance(size_t n) { tail_ += n; }  // n a multiple of kRingAlign
  // At a record boundary: true (and moved past it) when `record` is a skip marker.
  bool skip(std::span<const uint8_t> record) {
    uint32_t word;
    std::memcpy(&word, record.data(), sizeof(word));
    if (word != kRingSkip) return false;
    tail_ += capacity_ - tail_ % capacity_;
    return true;
  }
  bool publish() {
    if (tail_ == published_) return false;
    header_->tail.store(tail_, std::memory_order_release);
    published_ = tail_;
    return true;
  }
  // The producer cannot write a byte more (fresh read).
  bool full() {
    head_ = header_->head.load(std::memory_order_acquire);
    return head_ - published_ >= capacity_;
  }

 private:
  RingHeader* header_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;
  uint64_t published_ = 0;
  uint64_t head_ = 0;  // the producer's, as last read
};

// An mmap'd range of a segment, unmapped on destruction. Move-only.
class Mapping {
 public:
  Mapping() = default;
  // Maps [offset, offset + length) of fd shared and read-write, with its page tables
  // filled in now so the first message takes no page faults.
  Mapping(int fd, size_t offset, size_t length, const std::string& what);
  ~Mapping();
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Creates the segment /dev/shm/<name> (name starts with '/') of `bytes`, every page
// allocated now, so a full /dev/shm is an IoError here rather than a SIGBUS mid-message.
// Returns its fd (the caller closes it). The name outlives a process killed before it
// unlinks it: prefer an anonymous segment where peers can open one.
int create_segment(const std::string& name, size_t bytes);
// Creates an anonymous segment (a memfd) of `bytes`, allocated now. It never has a name in
// /dev/shm, so it cannot outlive the processes that map it, whatever kills them. Peers in
// this pid namespace (same user) open it by its locator, "/proc/<pid>/fd/<fd>@<inode>",
// while this process keeps the fd open. Returns the fd; `kind` names it in
// /proc/<pid>/maps ("memfd:braid-<kind>").
int create_anonymous_segment(const char* kind, size_t bytes, std::string& locator);
// Opens a peer's segment by /dev/shm name or anonymous locator; IoError naming `what`
// when it is missing (its process died), is not the segment the locator names, or is
// shorter than `bytes`.
int open_segment(const std::string& name, size_t bytes, const std::string& what);
// The pid namespace of this process (0 when unknown): peers open each other's anonymous
// segments only within one.
uint64_t pid_namespace();

template <typename Ready>
void sleep_until_rung(Doorbell& d, Ready&& ready, std::chrono::nanoseconds timeout) {
  struct Awake {  // clears the announcement however ready() leaves
    Doorbell& d;
    ~Awake() { d.sleeping.store(0, std::memory_order_relaxed); }
  } awake{d};
  d.sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t seq = d.seq.load(std::memory_order_acquire);
  if (!ready()) futex_wait(d.seq, seq, timeout);
}

}  // namespace braid::comm::shm
