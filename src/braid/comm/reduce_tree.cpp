// Binomial-tree reduce. Ranks are renumbered relative to the root (v = r - root mod n).
// In round k (mask = 2^k) a rank whose bit k is set sends its partial result to v - mask
// and is done; the others receive from v + mask (if it exists) and combine it in. So
// node v combines its children v+1, v+2, v+4, ... one after another, in that order, and
// the root finishes after ceil(log2 n) rounds. Each child is received straight into the
// buffer with a reduction, one at a time, which fixes the order of combination (and so
// the bits) without scratch; for the small messages a tree is chosen for, the children
// finish in that order anyway.
#include "comm/algorithms.h"

namespace braid::comm {

void reduce_tree(const CallContext& ctx, void* data, size_t count, int root) {
  const int n = ctx.size();
  const int v = mod(ctx.rank() - root, n);
  const size_t bytes = count * ctx.elem();
  uint32_t round = 0;
  for (int mask = 1; mask < n; mask *= 2, ++round) {
    if (v & mask) {
      ctx.wait(ctx.isend(mod(v - mask + root, n), round, data, bytes));
      return;
    }
    if (v + mask < n) ctx.wait(ctx.irecv_reduce(mod(v + mask + root, n), round, data, bytes));
  }
}

}  // namespace braid::comm
