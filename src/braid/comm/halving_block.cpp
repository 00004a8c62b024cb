// Recursive halving (reduce-scatter) and recursive doubling (all-gather) inside a block of
// m = 2^k ranks, the core of halving-doubling and binary-blocks allreduce (Rabenseifner).
//
// Halving: in step t the partner is at distance d = m / 2^(t+1) (index ^ d); the pair
// splits its current range of pieces in two, the rank whose bit d is clear keeps the lower
// half, sends the upper half and receives the partner's copy of the lower half, reducing
// it into place. After k steps index v owns the v-th of m equal ranges, and every element
// of it has been combined exactly once per step by exactly one rank. Doubling runs the
// steps backwards with d = 1, 2, ..., m / 2, each rank sending its range and copying in
// its partner's, so the owners' bits reach everyone.
#include "comm/algorithms.h"

namespace braid::comm {

namespace {

size_t piece_bytes(const CallContext& ctx, size_t count, size_t pieces, size_t lo, size_t hi) {
  return (split_offset(count, pieces, hi) - split_offset(count, pieces, lo)) * ctx.elem();
}

size_t piece_at(const CallContext& ctx, size_t count, size_t pieces, size_t p) {
  return split_offset(count, pieces, p) * ctx.elem();
}

}  // namespace

void halving_reduce_scatter(const CallContext& ctx, const HalvingBlock& b, void* data,
                            size_t count) {
  size_t lo = 0, hi = b.pieces;
  uint32_t step = 0;
  for (int d = b.size / 2; d >= 1; d /= 2, ++step) {
    const size_t mid = (lo + hi) / 2;
    const bool keep_lower = (b.index & d) == 0;
    const size_t keep_lo = keep_lower ? lo : mid, keep_hi = keep_lower ? mid : hi;
    const size_t send_lo = keep_lower ? mid : lo, send_hi = keep_lower ? hi : mid;
    const int partner = b.member(b.index ^ d);
    const RequestId ids[] = {
        ctx.isend(partner, step, at(data, piece_at(ctx, count, b.pieces, send_lo)),
                  piece_bytes(ctx, count, b.pieces, send_lo, send_hi)),
        ctx.irecv_reduce(partner, step, at(data, piece_at(ctx, count, b.pieces, keep_lo)),
                         piece_bytes(ctx, count, b.pieces, keep_lo, keep_hi))};
    ctx.wait(ids);
    lo = keep_lo;
    hi = keep_hi;
  }
}

void doubling_allgather(const CallContext& ctx, const HalvingBlock& b, void* data, size_t count) {
  const size_t share = b.pieces / static_cast<size_t>(b.size);
  size_t lo = static_cast<size_t>(b.index) * share, hi = lo + share;
  uint32_t step = 0;
  for (int d = 1; d < b.size; d *= 2, ++step) {
    const size_t width = hi - lo;
    const bool lower = (b.index & d) == 0;
    const size_t other_lo = lower ? hi : lo - width, other_hi = other_lo + width;
    const int partner = b.member(b.index ^ d);
    const RequestId ids[] = {
        ctx.isend(partner, step, at(data, piece_at(ctx, count, b.pieces, lo)),
                  piece_bytes(ctx, count, b.pieces, lo, hi)),
        ctx.irecv(partner, step, at(data, piece_at(ctx, count, b.pieces, other_lo)),
                  piece_bytes(ctx, count, b.pieces, other_lo, other_hi))};
    ctx.wait(ids);
    lo = std::min(lo, other_lo);
    hi = std::max(hi, other_hi);
  }
}

}  // namespace braid::comm
