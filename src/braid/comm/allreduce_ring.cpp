// Ring allreduce: a ring reduce-scatter in place, after which rank r holds chunk r+1 of
// the result, then a ring all-gather of those chunks, run as one pipeline (ring_pipeline.cpp)
// so each segment goes back out reduced while it is still in cache. Each rank sends and
// receives 2 (n-1)/n of the buffer, the minimum, over 2 (n-1) steps: the choice for large
// messages.
#include "comm/algorithms.h"

namespace braid::comm {

void allreduce_ring(const CallContext& ctx, void* data, size_t count) {
  const int n = ctx.size();
  if (n == 1) return;
  ring_pipeline(ctx.phase(0), ctx.phase(kPhaseSteps), data, count, n - 1, n - 1, 1);
}

}  // namespace braid::comm
