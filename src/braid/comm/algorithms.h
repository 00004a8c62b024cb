// Internal to comm/: what every collective algorithm is given (CallContext), the helpers
// they share, and one entry point per algorithm (one .cpp file each). The public
// functions of comm/collectives.h take the sequence number, build the signature, choose
// the algorithm, take the fast paths (group size 1, count 0) and divide for avg; an
// algorithm only moves and reduces, with avg reduced as sum. Every algorithm leaves
// bitwise-identical results on all ranks: each element is reduced by one rank in a fixed
// order and then copied.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "comm/algorithm.h"
#include "comm/group.h"
#include "comm/message.h"
#include "core/dtype.h"
#include "core/reduce.h"

namespace braid::comm {

class SharedWindow;

// One collective call on one rank.
struct CallContext {
  Group& group;
  uint32_t seq = 0;
  CallSignature sig;
  std::chrono::milliseconds timeout{};
  // Added to every step, so an algorithm built from others gives each part its own tags.
  uint32_t step_base = 0;

  int rank() const { return group.rank(); }
  int size() const { return group.size(); }
  DType dtype() const { return sig.dtype; }
  size_t elem() const { return dtype_size(sig.dtype); }
  // How receives combine: avg is summed here and divided once by the caller.
  Reduction reduction() const {
    return {sig.dtype, sig.op == ReduceOp::avg ? ReduceOp::sum : sig.op};
  }
  // The same call with steps offset by `base` (for the next phase of a composite).
  CallContext phase(uint32_t base) const {
    CallContext c = *this;
    c.step_base = step_base + base;
    return c;
  }

  Tag tag(uint32_t step) const { return {group.channel(), seq, step_base + step}; }
  // Peers are group ranks.
  RequestId isend(int to, uint32_t step, const void* data, size_t bytes) const {
    return group.transport().isend(group.global_rank(to), tag(step), sig, data, bytes);
  }
  RequestId irecv(int from, uint32_t step, void* data, size_t bytes) const {
    return group.transport().irecv(group.global_rank(from), tag(step), sig, data, bytes);
  }
  // data = op(data, incoming), element by element.
  RequestId irecv_reduce(int from, uint32_t step, void* data, size_t bytes) const {
    return group.transport().irecv(group.global_rank(from), tag(step), sig, data, bytes,
                                   reduction());
  }
  void wait(std::span<const RequestId> ids) const {
    if (!ids.empty()) group.transport().wait(ids, group.deadline_after(timeout));
  }
  void wait(RequestId id) const { wait(std::span<const RequestId>(&id, 1)); }
};

// Scratch memory for algorithms that need it (direct, reduce_scatter ring). One per
// thread: a Group is driven by one thread at a time and collectives block, so a thread
// runs one algorithm at a time. It grows to the largest request and is reused, so
// steady-state calls allocate nothing. Valid until the next call on this thread.
void* scratch(size_t bytes);

// Element offset of part i when `count` is split into `parts` near-equal parts (the
// first count % parts parts are one longer); part i spans [offset(i), offset(i + 1)).
inline size_t split_offset(size_t count, size_t parts, size_t i) {
  return count / parts * i + std::min(i, count % parts);
}

inline uint8_t* at(void* p, size_t bytes) { return static_cast<uint8_t*>(p) + bytes; }
inline const uint8_t* at(const void* p, size_t bytes) {
  return static_cast<const uint8_t*>(p) + bytes;
}
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Composite algorithms give each phase steps from its own range: phase(k * kPhaseSteps).
inline constexpr uint32_t kPhaseSteps = 1u << 24;

// Ring pipelining: a chunk is cut into segments of at most about kSegmentBytes, and up to
// kMaxInFlight (send, receive) segment pairs are in flight, so a link carries data both
// ways while the previous segment is reduced, and a segment is still in cache when it is
// forwarded. 4 x 1 MiB in flight: TCP needs that much queued to keep a link busy (with
// 256 KiB segments a 2-rank ring reached 55 % of the raw stream between two network
// namespaces, with 1 MiB 98 % of the duplex stream), and it still fits the L3 for shm.
inline constexpr size_t kSegmentBytes = size_t{1024} << 10;
inline constexpr int kMaxInFlight = 4;
inline size_t segments_for(size_t chunk_bytes) {
  return std::max<size_t>(1, (chunk_bytes + kSegmentBytes - 1) / kSegmentBytes);
}

// (send, receive) request pairs in flight, oldest waited first. Either side of a pair may
// be absent (an empty segment).
class PairWindow {
 public:
  PairWindow(const CallContext& ctx, int depth)
      : ctx_(ctx), depth_(std::clamp(depth, 1, kMaxInFlight)) {}
  ~PairWindow() = default;
  PairWindow(const PairWindow&) = delete;
  PairWindow& operator=(const PairWindow&) = delete;

  // Waits for the oldest pair when `depth` pairs are in flight.
  void make_room() {
    if (count_ == depth_) wait_oldest();
  }
  void push(const RequestId* ids, int n) {
    Slot& s = slots_[static_cast<size_t>((first_ + count_) % kMaxInFlight)];
    s.n = n;
    for (int i = 0; i < n; ++i) s.ids[static_cast<size_t>(i)] = ids[i];
    ++count_;
  }
  void drain() {
    while (count_ > 0) wait_oldest();
  }

 private:
  struct Slot {
    std::array<RequestId, 2> ids{};
    int n = 0;
  };
  void wait_oldest() {
    Slot& s = slots_[static_cast<size_t>(first_)];
    ctx_.wait(std::span<const RequestId>(s.ids.data(), static_cast<size_t>(s.n)));
    first_ = (first_ + 1) % kMaxInFlight;
    --count_;
  }
  const CallContext& ctx_;
  int depth_;
  std::array<Slot, kMaxInFlight> slots_{};
  int first_ = 0, count_ = 0;
};

// Which algorithms implement which call; the table and the options are checked with it.
bool algorithm_supported(CallKind call, Algorithm a);
// Used when a selection table has no row for a call.
Algorithm default_algorithm(CallKind call);
// "ring, tree" for error messages.
std::string supported_algorithm_names(CallKind call);

// Algorithms. Counts are elements; group size >= 2 and count >= 1 unless a file says
// otherwise.
void allreduce_ring(const CallContext& ctx, void* data, size_t count);
// On a group with shared buffers (shared_window.h): true when it did the call in place;
// false when the ranks agreed to run a transport algorithm instead (`forced`: the caller
// named one).
bool allreduce_shared(const CallContext& ctx, SharedWindow& window, void* data, size_t count,
                      bool forced);
void allreduce_halving_doubling(const CallContext& ctx, void* data, size_t count);
void allreduce_binary_blocks(const CallContext& ctx, void* data, size_t count);
void allreduce_tree(const CallContext& ctx, void* data, size_t count);
void allreduce_direct(const CallContext& ctx, void* data, size_t count);

void reduce_scatter_ring(const CallContext& ctx, const void* send, void* recv, size_t count);
void reduce_scatter_direct(const CallContext& ctx, const void* send, void* recv, size_t count);
// The reduce-scatter phase of ring allreduce: chunks are the balanced split of `count`
// into size parts; rank r finishes owning chunk (r + 1) % size, reduced in place.
void ring_reduce_scatter_inplace(const CallContext& ctx, void* data, size_t count);

void allgather_ring(const CallContext& ctx, const void* send, void* recv, size_t count);
void allgather_direct(const CallContext& ctx, const void* send, void* recv, size_t count);
// Chunks are the balanced split of `count` into size parts; rank r holds chunk
// (r + shift) % size and finishes holding all of them.
void ring_allgather_chunks(const CallContext& ctx, void* data, size_t count, int shift);
// The in-place ring schedule behind both (ring_pipeline.cpp): `reduce_steps` reducing
// steps under `reduce_ctx`, then `gather_steps` copying steps under `gather_ctx` in which
// rank r starts from chunk (r + gather_shift) % size, pipelined segment block by block.
void ring_pipeline(const CallContext& reduce_ctx, const CallContext& gather_ctx, void* data,
                   size_t count, int reduce_steps, int gather_steps, int gather_shift);

void broadcast_tree(const CallContext& ctx, void* data, size_t count, int root);
void broadcast_scatter_allgather(const CallContext& ctx, void* data, size_t count, int root);
void reduce_tree(const CallContext& ctx, void* data, size_t count, int root);
void reduce_ring(const CallContext& ctx, void* data, size_t count, int root);
void gather_direct(const CallContext& ctx, const void* send, void* recv, size_t count, int root);
void scatter_direct(const CallContext& ctx, const void* send, void* recv, size_t count, int root);
void alltoall_pairwise(const CallContext& ctx, const void* send, void* recv, size_t count);
void barrier_dissemination(const CallContext& ctx);

// Recursive halving and doubling inside a block of m = 2^k ranks (halving_block.cpp).
// Block index v is group rank map(v) = v < fold ? 2v + 1 : first + v + fold, which covers
// consecutive blocks (fold = 0) and the odd survivors of a fold. `count` is split into
// `pieces` parts (a power of two >= m); after halving, block index v owns pieces
// [v * pieces / m, (v + 1) * pieces / m), reduced over the block; doubling gathers them.
struct HalvingBlock {
  int first = 0;  // group rank of index 0 when fold == 0
  int size = 1;   // m, a power of two
  int fold = 0;
  int index = 0;  // this rank's index in the block
  size_t pieces = 1;
  int member(int v) const { return v < fold ? 2 * v + 1 : first + v + fold; }
};
void halving_reduce_scatter(const CallContext& ctx, const HalvingBlock& b, void* data,
                            size_t count);
void doubling_allgather(const CallContext& ctx, const HalvingBlock& b, void* data, size_t count);

}  // namespace braid::comm
