// The in-place ring schedule shared by allreduce, reduce-scatter and all-gather (Patarasuk
// and Yuan 2009; gloo's allreduce_ring_chunked). The n ranks form a ring (send right to
// r+1, receive from the left, r-1) and the data is cut into n chunks, the balanced split
// of the count. In a reducing step every rank sends one chunk right and combines the left
// neighbour's partial sum of another into its own copy as it arrives; after n-1 of them
// rank r owns chunk r+1 complete. In a gathering step every rank forwards the chunk it
// received the step before (its own first), a plain copy. Each rank sends and receives
// (n-1)/n of the data per phase: bandwidth-optimal.
//
// Pipelining: each chunk is cut into segments, and the steps run block by block of `depth`
// segments: every step of one block, then every step of the next. A segment is thus
// forwarded (and, in allreduce, sent back out fully reduced) while it is still in cache,
// instead of after the whole chunk has gone by. The window keeps `depth` (send, receive)
// pairs in flight, so a step's segment is sent only once the previous step's receive of
// it, exactly `depth` pairs earlier, has completed.
//
// Bitwise identity: each chunk is combined along one path, x[c] then x[c+1] up to
// x[c-1], by one rank per hop; gathering only copies the owner's result.
#include "comm/algorithms.h"
#include "core/error.h"

namespace braid::comm {

void ring_pipeline(const CallContext& reduce_ctx, const CallContext& gather_ctx, void* data,
                   size_t count, int reduce_steps, int gather_steps, int gather_shift) {
  const int n = reduce_ctx.size(), r = reduce_ctx.rank();
  const size_t es = reduce_ctx.elem(), parts = static_cast<size_t>(n);
  const size_t want = segments_for((count + parts - 1) / parts * es);
  const auto depth = std::min<size_t>(want, kMaxInFlight);
  const size_t nseg = (want + depth - 1) / depth * depth;  // whole blocks only
  const int steps = reduce_steps + gather_steps;
  BRAID_CHECK(static_cast<size_t>(std::max(reduce_steps, gather_steps)) * nseg < kPhaseSteps,
              "ring collective: ", n, " x ", nseg, " segment steps exceed the tag space");
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  PairWindow window(reduce_ctx, static_cast<int>(depth));
  for (size_t block = 0; block < nseg; block += depth) {
    for (int s = 0; s < steps; ++s) {
      const bool reducing = s < reduce_steps;
      const int t = reducing ? s : s - reduce_steps;
      // Step t sends the chunk that arrived in step t-1 (in step 0 the rank's own: chunk r
      // when reducing, r + shift when gathering) and receives the one before it.
      const int shift = reducing ? 0 : gather_shift;
      const auto send_chunk = static_cast<size_t>(mod(r + shift - t, n));
      const auto recv_chunk = static_cast<size_t>(mod(r + shift - t - 1, n));
      const size_t send_off = split_offset(count, parts, send_chunk);
      const size_t send_len = split_offset(count, parts, send_chunk + 1) - send_off;
      const size_t recv_off = split_offset(count, parts, recv_chunk);
      const size_t recv_len = split_offset(count, parts, recv_chunk + 1) - recv_off;
      const CallContext& ctx = reducing ? reduce_ctx : gather_ctx;
      for (size_t j = block; j < block + depth; ++j) {
        const auto step = static_cast<uint32_t>(static_cast<size_t>(t) * nseg + j);
        const size_t so = send_off + split_offset(send_len, nseg, j);
        const size_t sn = send_off + split_offset(send_len, nseg, j + 1) - so;
        const size_t ro = recv_off + split_offset(recv_len, nseg, j);
        const size_t rn = recv_off + split_offset(recv_len, nseg, j + 1) - ro;
        window.make_room();
        RequestId ids[2];
        int k = 0;
        if (sn) ids[k++] = ctx.isend(right, step, at(data, so * es), sn * es);
        if (rn)
          ids[k++] = reducing ? ctx.irecv_reduce(left, step, at(data, ro * es), rn * es)
                              : ctx.irecv(left, step, at(data, ro * es), rn * es);
        window.push(ids, k);
      }
    }
  }
  window.drain();
}

}  // namespace braid::comm
