// Dissemination barrier (Hensgen, Finkel and Manber 1988): in round k every rank sends an
// empty message to r + 2^k and waits for one from r - 2^k. After ceil(log2 n) rounds each
// rank has heard, directly or through others, from every rank, so all have entered.
#include "comm/algorithms.h"

namespace braid::comm {

void barrier_dissemination(const CallContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  uint32_t round = 0;
  for (int d = 1; d < n; d *= 2, ++round) {
    const RequestId ids[] = {ctx.isend(mod(r + d, n), round, nullptr, 0),
                             ctx.irecv(mod(r - d, n), round, nullptr, 0)};
    ctx.wait(ids);
  }
}

}  // namespace braid::comm
