// Broadcast for large messages (van de Geijn; MPICH's scatter + allgather): the root
// sends chunk c of the balanced split to rank c, then a ring all-gather
// (allgather_ring.cpp) gives everyone every chunk. The root sends (n-1)/n of the buffer
// instead of log2 n whole copies, and every link carries about 2 (n-1)/n of it. This is
// the Algorithm::ring of broadcast.
#include <vector>

#include "comm/algorithms.h"

namespace braid::comm {

void broadcast_scatter_allgather(const CallContext& ctx, void* data, size_t count, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = ctx.elem(), parts = static_cast<size_t>(n);
  auto chunk_at = [&](int c) { return split_offset(count, parts, static_cast<size_t>(c)) * es; };
  auto chunk_bytes = [&](int c) { return chunk_at(c + 1) - chunk_at(c); };
  const CallContext scatter = ctx.phase(0);
  if (r == root) {
    std::vector<RequestId> ids;
    ids.reserve(parts);
    for (int c = 0; c < n; ++c)
      if (c != root && chunk_bytes(c) > 0)
        ids.push_back(scatter.isend(c, 0, at(data, chunk_at(c)), chunk_bytes(c)));
    scatter.wait(ids);
  } else if (chunk_bytes(r) > 0) {
    scatter.wait(scatter.irecv(root, 0, at(data, chunk_at(r)), chunk_bytes(r)));
  }
  ring_allgather_chunks(ctx.phase(kPhaseSteps), data, count, 0);
}

}  // namespace braid::comm
