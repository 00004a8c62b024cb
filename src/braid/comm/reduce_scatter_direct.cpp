// Direct reduce-scatter: every rank sends block p of its input to rank p and receives
// its own block from everyone into scratch, then combines them in rank order 0 .. n-1.
// One round of latency, n-1 messages per rank: for small blocks in small groups.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"

namespace braid::comm {

void reduce_scatter_direct(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = count * ctx.elem();
  auto* all = static_cast<uint8_t*>(scratch(bytes * static_cast<size_t>(n)));
  const uint8_t* own = at(send, static_cast<size_t>(r) * bytes);
  std::memcpy(all + static_cast<size_t>(r) * bytes, own, bytes);
  std::vector<RequestId> ids;
  ids.reserve(2 * static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    ids.push_back(ctx.isend(p, 0, at(send, static_cast<size_t>(p) * bytes), bytes));
    ids.push_back(ctx.irecv(p, 0, all + static_cast<size_t>(p) * bytes, bytes));
  }
  ctx.wait(ids);
  const Reduction red = ctx.reduction();
  reduce_pair(red.dtype, red.op, recv, all, all + bytes, count);
  for (int p = 2; p < n; ++p)
    reduce_into(red.dtype, red.op, recv, all + static_cast<size_t>(p) * bytes, count);
}

}  // namespace braid::comm
