// Reduce for large messages (Rabenseifner's reduce-scatter + gather): a ring
// reduce-scatter in place (reduce_scatter_ring.cpp) leaves chunk r+1 of the result on
// rank r, then every rank sends its chunk to the root. Each rank sends about (n-1)/n of
// the buffer instead of a tree's whole buffer per level. Non-root buffers are scratch,
// as reduce allows. This is the Algorithm::ring of reduce.
#include <vector>

#include "comm/algorithms.h"

namespace braid::comm {

void reduce_ring(const CallContext& ctx, void* data, size_t count, int root) {
  const int n = ctx.size(), r = ctx.rank();
  ring_reduce_scatter_inplace(ctx.phase(0), data, count);
  const size_t es = ctx.elem(), parts = static_cast<size_t>(n);
  auto chunk_at = [&](int c) { return split_offset(count, parts, static_cast<size_t>(c)) * es; };
  auto chunk_bytes = [&](int c) { return chunk_at(c + 1) - chunk_at(c); };
  const CallContext gather = ctx.phase(kPhaseSteps);
  const int mine = mod(r + 1, n);
  if (r != root) {
    if (chunk_bytes(mine) > 0)
      gather.wait(gather.isend(root, 0, at(data, chunk_at(mine)), chunk_bytes(mine)));
    return;
  }
  std::vector<RequestId> ids;
  ids.reserve(parts);
  for (int c = 0; c < n; ++c) {
    const int owner = mod(c - 1, n);
    if (owner != root && chunk_bytes(c) > 0)
      ids.push_back(gather.irecv(owner, 0, at(data, chunk_at(c)), chunk_bytes(c)));
  }
  gather.wait(ids);
}

}  // namespace braid::comm
