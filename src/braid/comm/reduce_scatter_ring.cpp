// Ring reduce-scatter. The n ranks form a ring (send right to r+1, receive from the left,
// r-1) and the data is cut into n chunks. In step s = 0 .. n-2 every rank sends one chunk
// right and receives the left neighbour's partial sum of another chunk, combining it into
// its own copy as it arrives; a chunk's partial sum thus travels n-1 hops, gaining one
// rank's contribution per hop in ring order, and ends complete on one rank. Each rank
// sends and receives (n-1)/n of the data: bandwidth-optimal, with n-1 steps of latency.
//
// Each chunk is cut into segments (kSegmentBytes); up to kMaxInFlight (send, receive)
// segment pairs are in flight, never more than a chunk's segments, so the segment sent in
// step s+1 was received in step s before it is forwarded.
//
// In place (ring_pipeline.cpp, shared with allreduce and all-gather) the chunks are the
// balanced split of the buffer and rank r finishes with chunk r+1. The public
// reduce_scatter below cannot write to `send`, so a
// step's incoming partial is combined into a copy of the rank's own chunk: step s uses
// `recv` or one chunk of scratch, alternating so the last step lands in `recv`.
#include <cstring>

#include "comm/algorithms.h"
#include "core/error.h"

namespace braid::comm {

namespace {

uint32_t ring_step(size_t s, size_t nseg, size_t j) {
  const size_t step = s * nseg + j;
  BRAID_CHECK(step < kPhaseSteps, "ring collective: ", step, " segment steps exceed the tag space");
  return static_cast<uint32_t>(step);
}

}  // namespace

void ring_reduce_scatter_inplace(const CallContext& ctx, void* data, size_t count) {
  ring_pipeline(ctx, ctx, data, count, ctx.size() - 1, 0, 0);
}

void reduce_scatter_ring(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = ctx.elem(), bytes = count * es;
  const size_t nseg = segments_for(bytes);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  // Where step s accumulates: recv on the last step and every second one before it.
  void* spare = n > 2 ? scratch(bytes) : nullptr;
  auto slot = [&](int s) { return (n - 2 - s) % 2 == 0 ? recv : spare; };
  PairWindow window(ctx, static_cast<int>(std::min<size_t>(nseg, kMaxInFlight)));
  for (int s = 0; s < n - 1; ++s) {
    // Step 0 forwards this rank's own block; later steps forward what came in before.
    const auto send_block = static_cast<size_t>(mod(r - s - 1, n));
    const auto recv_block = static_cast<size_t>(mod(r - s - 2, n));
    const void* from = s == 0 ? at(send, send_block * bytes) : slot(s - 1);
    void* into = slot(s);
    const uint8_t* own = at(send, recv_block * bytes);
    for (size_t j = 0; j < nseg; ++j) {
      const uint32_t step = ring_step(static_cast<size_t>(s), nseg, j);
      const size_t o = split_offset(count, nseg, j) * es;
      const size_t len = split_offset(count, nseg, j + 1) * es - o;
      window.make_room();  // the pair that last used this segment of `into` is done
      std::memcpy(at(into, o), own + o, len);
      const RequestId ids[2] = {ctx.isend(right, step, at(from, o), len),
                                ctx.irecv_reduce(left, step, at(into, o), len)};
      window.push(ids, 2);
    }
  }
  window.drain();
}

}  // namespace braid::comm
