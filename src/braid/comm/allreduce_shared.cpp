// Allreduce on shared buffers (comm/shared_buffer.h): every rank maps every peer's buffer,
// so nothing goes through the transport. Rank r owns share r (split_offset) of every
// buffer: block by block it reduces share r of all buffers into its own, in rank order, and
// writes the result into every peer's buffer. Per rank that is one pass reading the n
// inputs and one write per peer, about 2 x count bytes of memory traffic against the ring's
// copy into and out of a transport ring at every hop. One rank reduces each element and
// the others receive its bits, so results are bitwise identical everywhere.
//
// Why it is safe in place: during the call only rank r reads or writes share r of any
// buffer. A rank starts only once every rank has entered (its input is complete) and
// returns only once every rank has finished (its whole buffer is written).
//
// Handshake (comm/shared_window.h): every allreduce on a group with a window publishes a
// Descriptor and waits for the peers'; all ranks read the same descriptors, so they agree
// whether to go on here or fall back to the transport algorithms (return false).
#include <cstring>

#include "comm/algorithms.h"
#include "comm/shared_window.h"
#include "core/error.h"
#include "core/memory.h"

namespace braid::comm {

namespace {

constexpr size_t kBlockBytes = size_t{64} << 10;  // stays in L2 between reduce and copies
// From this size the copies bypass the cache (copy_streaming): the buffer no longer fits
// in it, and skipping the read of every destination line saves a third of a copy's traffic.
constexpr size_t kStreamBytes = size_t{8} << 20;

std::string describe_descriptor(const Descriptor& d) {
  return detail::concat(d.count, " x ", dtype_name(static_cast<DType>(d.dtype)), " ",
                        reduce_op_name(static_cast<ReduceOp>(d.op)));
}

// Whether every rank named the same range of the same shared buffer; throws when ranks
// disagree about the call itself.
bool agree(const CallContext& ctx, SharedWindow& w, const Descriptor& mine) {
  bool same_range = true;
  for (int p = 0; p < ctx.size(); ++p) {
    const Descriptor d = w.control(p).descriptor;
    if (d.count != mine.count || d.dtype != mine.dtype || d.op != mine.op)
      BRAID_THROW(CollectiveMismatch, "rank ", ctx.rank(), " is in ",
                  describe_call(ctx.sig, ctx.seq), " (", describe_descriptor(mine), ") but rank ",
                  p, " is in an allreduce of ", describe_descriptor(d),
                  "; every rank must make the same calls");
    const Descriptor& first = w.control(0).descriptor;
    same_range = same_range && d.region != 0 && d.region == first.region &&
                 d.offset == first.offset && !d.forced;
  }
  return same_range;
}

// Throws at once when peer `p` has published another kind of collective under this call's
// number (or any call past it): it will never meet this one. Another allreduce under the
// same number meets it, and agree() names how their descriptors differ.
void check_same_call(const CallContext& ctx, const SharedWindow& w, int p) {
  const auto theirs = w.published_call(p);
  if (!theirs) return;
  const auto& [seq, sig] = *theirs;
  const auto ahead = static_cast<int32_t>(seq - ctx.seq);  // wraps like the sequence numbers
  if ((ahead == 0 && sig.call != ctx.sig.call) || ahead > 0)
    BRAID_THROW(CollectiveMismatch, "ranks ", ctx.rank(), " and ", p,
                " disagree about the call they are in: rank ", ctx.rank(), " is in ",
                describe_call(ctx.sig, ctx.seq), " but rank ", p, " is in ",
                describe_call(sig, seq), "; every rank must make the same calls in the same order");
}

// Publishes `call` in this rank's `counter` (release, after everything it wrote), then
// waits until every peer's has reached it.
void meet(const CallContext& ctx, SharedWindow& w, std::atomic<uint64_t> ControlBlock::*counter,
          uint64_t call, const Deadline& deadline, const char* doing) {
  (w.control(ctx.rank()).*counter).store(call, std::memory_order_release);
  for (int p = 0; p < ctx.size(); ++p) {
    if (p == ctx.rank()) continue;
    const std::atomic<uint64_t>& theirs = w.control(p).*counter;
    wait_for_peer(
        ctx.group, p, deadline,
        [&] {
          if (theirs.load(std::memory_order_acquire) >= call) return true;
          // Until this rank finishes, a peer that entered cannot pass the call: waiting for
          // it to enter, anything else it published is another call. (Waiting for it to
          // finish, it may already be in the next one.)
          if (counter == &ControlBlock::entered) check_same_call(ctx, w, p);
          return false;
        },
        [&] {
          return detail::concat("rank ", p, " ", doing, " ", describe_call(ctx.sig, ctx.seq));
        });
  }
}

}  // namespace

bool allreduce_shared(const CallContext& ctx, SharedWindow& w, void* data, size_t count,
                      bool forced) {
  const int n = ctx.size(), me = ctx.rank();
  const size_t elem = ctx.elem();
  const uint64_t call = w.next_call();
  const Deadline deadline = ctx.group.deadline_after(ctx.timeout);

  const SharedRegion* region = w.find(data, count * elem);
  Descriptor mine;
  mine.region = region ? region->id : 0;
  mine.offset = region ? static_cast<uint64_t>(static_cast<uint8_t*>(data) - region->data()) : 0;
  mine.count = count;
  mine.dtype = static_cast<uint8_t>(ctx.dtype());
  mine.op = static_cast<uint8_t>(ctx.sig.op);
  mine.forced = forced ? 1 : 0;
  w.control(me).descriptor = mine;
  meet(ctx, w, &ControlBlock::entered, call, deadline, "to enter");
  if (!agree(ctx, w, mine)) return false;

  // Share `me` of every buffer is this rank's alone until it finishes.
  const size_t block = kBlockBytes / elem;
  const ReduceOp op = ctx.reduction().op;
  const bool stream = count * elem >= kStreamBytes;
  const size_t first = split_offset(count, static_cast<size_t>(n), static_cast<size_t>(me));
  const size_t last = split_offset(count, static_cast<size_t>(n), static_cast<size_t>(me) + 1);
  auto at_elem = [&](int r, size_t i) {
    return region->base[static_cast<size_t>(r)] + mine.offset + i * elem;
  };
  for (size_t lo = first; lo < last; lo += block) {
    const size_t len = std::min(block, last - lo);
    uint8_t* result = at_elem(me, lo);
    for (int p = 0; p < n; ++p)
      if (p != me) reduce_into(ctx.dtype(), op, result, at_elem(p, lo), len);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      if (stream)
        copy_streaming(at_elem(p, lo), result, len * elem);
      else
        std::memcpy(at_elem(p, lo), result, len * elem);
    }
  }

  meet(ctx, w, &ControlBlock::finished, call, deadline, "to write its share into every buffer in");
  w.count_in_place();
  return true;
}

}  // namespace braid::comm
