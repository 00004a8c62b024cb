// Allreduce on shared buffers (comm/shared_buffer.h): every rank maps every peer's buffer,
// so nothing goes through the transport. Rank r owns share r (split_offset) and reduces it
// block by block straight out of the peers' buffers into its own, in rank order, then
// publishes how many blocks are done; meanwhile it copies each peer's finished blocks of
// that peer's share into its own buffer. Per rank that is one pass reading n inputs and one
// copy, against the ring's copy into and out of a transport ring at every hop, and a block
// is copied soon after it was reduced, while still in cache. One rank reduces each element
// and the others copy it, so results are bitwise identical everywhere.
//
// Why it is safe to write in place: rank r overwrites its block j of share p only after
// rank p has published block j reduced, that is after p read it; and rank r returns only
// after every peer has published that it finished, that is stopped reading r's buffer.
//
// Handshake (comm/shared_window.h): every allreduce on a group with a window publishes a
// Descriptor and waits for the peers'; all ranks read the same descriptors, so they agree
// whether to go on here or fall back to the transport algorithms (return false).
#include <cstring>

#include "comm/algorithms.h"
#include "comm/shared_window.h"
#include "core/error.h"

namespace braid::comm {

namespace {

constexpr size_t kBlockBytes = size_t{64} << 10;  // small enough to stay in L2 while copied
constexpr uint64_t kBlockMask = 0xffffffffULL;

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

}  // namespace

bool allreduce_shared(const CallContext& ctx, SharedWindow& w, void* data, size_t count,
                      bool forced) {
  Group& g = ctx.group;
  const int n = ctx.size(), me = ctx.rank();
  const size_t elem = ctx.elem();
  const uint64_t call = w.next_call();
  const Deadline deadline = Deadline::after(ctx.timeout);

  const SharedRegion* region = w.find(data, count * elem);
  Descriptor mine;
  mine.region = region ? region->id : 0;
  mine.offset = region ? static_cast<uint64_t>(static_cast<uint8_t*>(data) - region->data()) : 0;
  mine.count = count;
  mine.dtype = static_cast<uint8_t>(ctx.dtype());
  mine.op = static_cast<uint8_t>(ctx.sig.op);
  mine.forced = forced ? 1 : 0;
  ControlBlock& own = w.control(me);
  own.descriptor = mine;
  own.entered.store(call, std::memory_order_release);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    ControlBlock& c = w.control(p);
    wait_for_peer(
        g, p, deadline, [&] { return c.entered.load(std::memory_order_acquire) >= call; },
        [&] { return detail::concat("rank ", p, " to enter ", describe_call(ctx.sig, ctx.seq)); });
  }
  if (!agree(ctx, w, mine)) return false;

  const size_t block = kBlockBytes / elem;
  const uint64_t stamp = (call & kBlockMask) << 32;
  const ReduceOp op = ctx.reduction().op;
  auto first_of = [&](int r) {
    return split_offset(count, static_cast<size_t>(n), static_cast<size_t>(r));
  };
  auto blocks_of = [&](int r) { return (first_of(r + 1) - first_of(r) + block - 1) / block; };
  auto at_elem = [&](int r, size_t i) {
    return region->base[static_cast<size_t>(r)] + mine.offset + i * elem;
  };
  // Copies the blocks of share p in [from, to) from rank p's buffer into this rank's.
  auto copy_blocks = [&](int p, size_t from, size_t to) {
    const size_t lo = first_of(p) + from * block;
    const size_t hi = std::min(first_of(p + 1), first_of(p) + to * block);
    if (hi > lo) std::memcpy(at_elem(me, lo), at_elem(p, lo), (hi - lo) * elem);
  };
  std::vector<size_t>& copied = w.scratch(static_cast<size_t>(n));
  auto copy_ready = [&](int p) {
    const uint64_t v = w.control(p).progress.load(std::memory_order_acquire);
    const size_t ready = (v & ~kBlockMask) == stamp ? static_cast<size_t>(v & kBlockMask) : 0;
    if (ready > copied[static_cast<size_t>(p)]) {
      copy_blocks(p, copied[static_cast<size_t>(p)], ready);
      copied[static_cast<size_t>(p)] = ready;
    }
    return copied[static_cast<size_t>(p)] == blocks_of(p);
  };

  const size_t own_blocks = blocks_of(me);
  for (size_t k = 0; k < own_blocks; ++k) {
    const size_t lo = first_of(me) + k * block;
    const size_t len = std::min(block, first_of(me + 1) - lo);
    for (int p = 0; p < n; ++p)
      if (p != me) reduce_into(ctx.dtype(), op, at_elem(me, lo), at_elem(p, lo), len);
    own.progress.store(stamp | (k + 1), std::memory_order_release);
    for (int p = 0; p < n; ++p)
      if (p != me) copy_ready(p);
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    wait_for_peer(
        g, p, deadline, [&] { return copy_ready(p); },
        [&] {
          return detail::concat("rank ", p, " to reduce its share of ",
                                describe_call(ctx.sig, ctx.seq), " (",
                                copied[static_cast<size_t>(p)], " of ", blocks_of(p), " blocks)");
        });
  }

  own.finished.store(call, std::memory_order_release);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    ControlBlock& c = w.control(p);
    wait_for_peer(
        g, p, deadline, [&] { return c.finished.load(std::memory_order_acquire) >= call; },
        [&] {
          return detail::concat("rank ", p, " to finish reading this rank's buffer in ",
                                describe_call(ctx.sig, ctx.seq));
        });
  }
  w.count_in_place();
  return true;
}

}  // namespace braid::comm
