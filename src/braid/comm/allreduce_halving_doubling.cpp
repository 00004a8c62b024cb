// Halving-doubling allreduce (Rabenseifner; Thakur, Rabenseifner and Gropp 2005):
// recursive-halving reduce-scatter then recursive-doubling all-gather among p = 2^k
// ranks, log2(p) steps each, every rank sending and receiving about 2 (p-1)/p of the
// buffer in total. Latency-optimal for medium messages.
//
// A size that is not a power of two is folded first (as MPICH does): with rem = n - p,
// each even rank 2i < 2 rem sends its whole buffer to rank 2i+1, which reduces it in and
// takes part for both; afterwards it sends the result back. The fold costs one extra
// full-buffer exchange on those pairs; allreduce_binary_blocks avoids it.
#include <bit>

#include "comm/algorithms.h"

namespace braid::comm {

void allreduce_halving_doubling(const CallContext& ctx, void* data, size_t count) {
  const int n = ctx.size(), r = ctx.rank();
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - p;
  const size_t bytes = count * ctx.elem();
  const CallContext fold = ctx.phase(0);
  if (r < 2 * rem && r % 2 == 0) {
    // Folded out: hand the data to the odd neighbour, get the result back.
    fold.wait(fold.isend(r + 1, 0, data, bytes));
    fold.wait(fold.irecv(r + 1, 1, data, bytes));
    return;
  }
  if (r < 2 * rem) fold.wait(fold.irecv_reduce(r - 1, 0, data, bytes));

  HalvingBlock block;
  block.size = p;
  block.fold = rem;
  block.index = r < 2 * rem ? r / 2 : r - rem;
  block.pieces = static_cast<size_t>(p);
  halving_reduce_scatter(ctx.phase(1 * kPhaseSteps), block, data, count);
  doubling_allgather(ctx.phase(2 * kPhaseSteps), block, data, count);

  if (r < 2 * rem) fold.wait(fold.isend(r - 1, 1, data, bytes));
}

}  // namespace braid::comm
