// Ring allreduce (Patarasuk and Yuan 2009; gloo's allreduce_ring_chunked, Baidu's ring):
// a ring reduce-scatter in place (reduce_scatter_ring.cpp), after which rank r holds
// chunk r+1 of the result, then a ring all-gather of those chunks (allgather_ring.cpp).
// Each rank sends and receives 2 (n-1)/n of the buffer, the minimum, over 2 (n-1) steps,
// so this is the choice for large messages. Chunks are the balanced split of the count
// (any count, also below the group size), and each is pipelined in segments.
//
// Bitwise identity: each chunk is combined along one path, x[c] then x[c+1] up to
// x[c-1], by one rank per hop; the all-gather only copies the owner's result.
#include "comm/algorithms.h"

namespace braid::comm {

void allreduce_ring(const CallContext& ctx, void* data, size_t count) {
  ring_reduce_scatter_inplace(ctx.phase(0), data, count);
  ring_allgather_chunks(ctx.phase(kPhaseSteps), data, count, 1);
}

}  // namespace braid::comm
