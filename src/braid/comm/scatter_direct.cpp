// Direct scatter: the root sends block p to rank p, all sends in flight at once, and
// copies its own block locally.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"

namespace braid::comm {

void scatter_direct(const CallContext& ctx, const void* send, void* recv, size_t count, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = count * ctx.elem();
  if (r != root) return ctx.wait(ctx.irecv(root, 0, recv, bytes));
  std::memcpy(recv, at(send, static_cast<size_t>(r) * bytes), bytes);
  std::vector<RequestId> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p)
    if (p != r) ids.push_back(ctx.isend(p, 0, at(send, static_cast<size_t>(p) * bytes), bytes));
  ctx.wait(ids);
}

}  // namespace braid::comm
