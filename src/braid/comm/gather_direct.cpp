// Direct gather: every rank sends its block to the root, which has all receives in flight
// at once and copies its own block locally.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"

namespace braid::comm {

void gather_direct(const CallContext& ctx, const void* send, void* recv, size_t count, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = count * ctx.elem();
  if (r != root) return ctx.wait(ctx.isend(root, 0, send, bytes));
  std::memcpy(at(recv, static_cast<size_t>(r) * bytes), send, bytes);
  std::vector<RequestId> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p)
    if (p != r) ids.push_back(ctx.irecv(p, 0, at(recv, static_cast<size_t>(p) * bytes), bytes));
  ctx.wait(ids);
}

}  // namespace braid::comm
