// Binomial-tree broadcast. Ranks are renumbered relative to the root (v = r - root mod
// n). A rank receives once, from v minus its lowest set bit, then sends to v + 2^j for
// every 2^j below that bit (largest subtree first), all sends in flight together. The
// data reaches all n ranks in ceil(log2 n) rounds: the choice for small messages. Large
// ones go through broadcast_scatter_allgather.cpp, which does not send the whole buffer
// log2 n times.
#include "comm/algorithms.h"

namespace braid::comm {

void broadcast_tree(const CallContext& ctx, void* data, size_t count, int root) {
  const int n = ctx.size();
  const int v = mod(ctx.rank() - root, n);
  const size_t bytes = count * ctx.elem();
  int mask = 1;
  for (; mask < n; mask *= 2) {
    if (v & mask) {
      ctx.wait(ctx.irecv(mod(v - mask + root, n), 0, data, bytes));
      break;
    }
  }
  std::array<RequestId, 32> ids{};
  size_t k = 0;
  for (mask /= 2; mask > 0; mask /= 2)
    if (v + mask < n) ids[k++] = ctx.isend(mod(v + mask + root, n), 0, data, bytes);
  ctx.wait(std::span<const RequestId>(ids.data(), k));
}

}  // namespace braid::comm
