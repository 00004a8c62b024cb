// Tree allreduce: binomial-tree reduce to rank 0 (reduce_tree.cpp) then binomial-tree
// broadcast from it (broadcast_tree.cpp). 2 ceil(log2 n) rounds of whole-buffer messages:
// few messages, so the choice for small buffers in larger groups. Rank 0 alone computes
// the result and everyone else copies it.
#include "comm/algorithms.h"

namespace braid::comm {

void allreduce_tree(const CallContext& ctx, void* data, size_t count) {
  reduce_tree(ctx.phase(0), data, count, 0);
  broadcast_tree(ctx.phase(kPhaseSteps), data, count, 0);
}

}  // namespace braid::comm
