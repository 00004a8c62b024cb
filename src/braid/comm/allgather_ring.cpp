// Ring all-gather. The n ranks form a ring and each starts with one of n chunks; in step
// s = 0 .. n-2 every rank sends right the chunk it received in the step before (its own
// in step 0) and receives the next one from the left, so after n-1 steps every chunk has
// visited every rank. Each rank sends and receives (n-1)/n of the result: bandwidth-
// optimal. Chunks are pipelined in segments as in reduce_scatter_ring.cpp. Only copies:
// every rank ends with the owners' bits.
#include <cstring>

#include "comm/algorithms.h"
#include "core/error.h"

namespace braid::comm {

void ring_allgather_chunks(const CallContext& ctx, void* data, size_t count, int shift) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = ctx.elem(), parts = static_cast<size_t>(n);
  const size_t nseg = segments_for((count + parts - 1) / parts * es);
  BRAID_CHECK(static_cast<size_t>(n) * nseg < kPhaseSteps, "ring all-gather: ", n, " x ", nseg,
              " segment steps exceed the tag space");
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  PairWindow window(ctx, static_cast<int>(std::min<size_t>(nseg, kMaxInFlight)));
  for (int s = 0; s < n - 1; ++s) {
    const auto send_chunk = static_cast<size_t>(mod(r + shift - s, n));
    const auto recv_chunk = static_cast<size_t>(mod(r + shift - s - 1, n));
    const size_t send_off = split_offset(count, parts, send_chunk);
    const size_t send_len = split_offset(count, parts, send_chunk + 1) - send_off;
    const size_t recv_off = split_offset(count, parts, recv_chunk);
    const size_t recv_len = split_offset(count, parts, recv_chunk + 1) - recv_off;
    for (size_t j = 0; j < nseg; ++j) {
      const auto step = static_cast<uint32_t>(static_cast<size_t>(s) * nseg + j);
      const size_t so = send_off + split_offset(send_len, nseg, j);
      const size_t sn = send_off + split_offset(send_len, nseg, j + 1) - so;
      const size_t ro = recv_off + split_offset(recv_len, nseg, j);
      const size_t rn = recv_off + split_offset(recv_len, nseg, j + 1) - ro;
      window.make_room();
      RequestId ids[2];
      int k = 0;
      if (sn) ids[k++] = ctx.isend(right, step, at(data, so * es), sn * es);
      if (rn) ids[k++] = ctx.irecv(left, step, at(data, ro * es), rn * es);
      window.push(ids, k);
    }
  }
  window.drain();
}

void allgather_ring(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const size_t bytes = count * ctx.elem();
  uint8_t* mine = at(recv, static_cast<size_t>(ctx.rank()) * bytes);
  if (send != mine) std::memcpy(mine, send, bytes);
  // Blocks of `count` are exactly the balanced split of size * count.
  ring_allgather_chunks(ctx, recv, count * static_cast<size_t>(ctx.size()), 0);
}

}  // namespace braid::comm
