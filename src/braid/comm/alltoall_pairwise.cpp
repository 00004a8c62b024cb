// Pairwise all-to-all: in step k = 1 .. n-1 rank r sends its block for r+k and receives
// the block from r-k, a permutation per step so no rank is flooded; up to kMaxInFlight
// steps overlap. Its own block is copied locally. This is the Algorithm::direct of
// alltoall.
#include <cstring>

#include "comm/algorithms.h"

namespace braid::comm {

void alltoall_pairwise(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = count * ctx.elem();
  std::memcpy(at(recv, static_cast<size_t>(r) * bytes), at(send, static_cast<size_t>(r) * bytes),
              bytes);
  PairWindow window(ctx, kMaxInFlight);
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    window.make_room();
    const RequestId ids[2] = {
        ctx.isend(to, 0, at(send, static_cast<size_t>(to) * bytes), bytes),
        ctx.irecv(from, 0, at(recv, static_cast<size_t>(from) * bytes), bytes)};
    window.push(ids, 2);
  }
  window.drain();
}

}  // namespace braid::comm
