// Ring all-gather. The n ranks form a ring and each starts with one of n chunks; in step
// s = 0 .. n-2 every rank sends right the chunk it received in the step before (its own
// in step 0) and receives the next one from the left, so after n-1 steps every chunk has
// visited every rank. Each rank sends and receives (n-1)/n of the result: bandwidth-
// optimal. Chunks are pipelined in segments (ring_pipeline.cpp). Only copies:
// every rank ends with the owners' bits.
#include <cstring>

#include "comm/algorithms.h"

namespace braid::comm {

void ring_allgather_chunks(const CallContext& ctx, void* data, size_t count, int shift) {
  ring_pipeline(ctx, ctx, data, count, 0, ctx.size() - 1, shift);
}

void allgather_ring(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const size_t bytes = count * ctx.elem();
  uint8_t* mine = at(recv, static_cast<size_t>(ctx.rank()) * bytes);
  if (send != mine) std::memcpy(mine, send, bytes);
  // Blocks of `count` are exactly the balanced split of size * count.
  ring_allgather_chunks(ctx, recv, count * static_cast<size_t>(ctx.size()), 0);
}

}  // namespace braid::comm
