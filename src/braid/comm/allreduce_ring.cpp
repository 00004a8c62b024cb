// Ring allreduce (Patarasuk and Yuan 2009; gloo's allreduce_ring_chunked, Baidu's ring):
// a ring reduce-scatter in place, after which rank r holds chunk r+1 of the result, then
// a ring all-gather of those chunks. Each rank sends and receives 2 (n-1)/n of the buffer,
// the minimum, over 2 (n-1) steps, so this is the choice for large messages. Chunks are
// the balanced split of the count (any count, also below the group size).
//
// Pipelining: each chunk is cut into segments, and the 2 (n-1) steps run block by block of
// `depth` segments: every step of one block, then every step of the next. A segment is
// thus forwarded (and, at the phase boundary, sent back out fully reduced) while it is
// still in cache, instead of after the whole chunk has gone by; running the two phases
// one after the other costs a re-read of the buffer from memory on large messages.
// Within a block the window keeps `depth` (send, receive) pairs in flight, and a step's
// segment is sent only after the previous step's receive of it completed (exactly
// `depth` pairs earlier).
//
// Bitwise identity: each chunk is combined along one path, x[c] then x[c+1] up to
// x[c-1], by one rank per hop; the all-gather only copies the owner's result.
#include "comm/algorithms.h"
#include "core/error.h"

namespace braid::comm {

void allreduce_ring(const CallContext& ctx, void* data, size_t count) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1) return;
  const size_t es = ctx.elem(), parts = static_cast<size_t>(n);
  const size_t want = segments_for((count + parts - 1) / parts * es);
  const auto depth = static_cast<size_t>(std::min<size_t>(want, kMaxInFlight));
  const size_t nseg = (want + depth - 1) / depth * depth;  // whole blocks only
  const int steps = 2 * (n - 1);
  BRAID_CHECK(static_cast<size_t>(n) * nseg < kPhaseSteps, "ring allreduce: ", n, " x ", nseg,
              " segment steps exceed the tag space");
  const CallContext reduce_phase = ctx.phase(0), gather_phase = ctx.phase(kPhaseSteps);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  PairWindow window(ctx, static_cast<int>(depth));
  for (size_t block = 0; block < nseg; block += depth) {
    for (int s = 0; s < steps; ++s) {
      // Reduce-scatter steps combine into the chunk received; all-gather steps copy the
      // owner's result, starting with this rank's own chunk r+1.
      const bool reducing = s < n - 1;
      const int t = reducing ? s : s - (n - 1);
      const auto send_chunk = static_cast<size_t>(reducing ? mod(r - t, n) : mod(r + 1 - t, n));
      const auto recv_chunk = static_cast<size_t>(reducing ? mod(r - t - 1, n) : mod(r - t, n));
      const size_t send_off = split_offset(count, parts, send_chunk);
      const size_t send_len = split_offset(count, parts, send_chunk + 1) - send_off;
      const size_t recv_off = split_offset(count, parts, recv_chunk);
      const size_t recv_len = split_offset(count, parts, recv_chunk + 1) - recv_off;
      const CallContext& phase = reducing ? reduce_phase : gather_phase;
      for (size_t j = block; j < block + depth; ++j) {
        const auto step = static_cast<uint32_t>(static_cast<size_t>(t) * nseg + j);
        const size_t so = send_off + split_offset(send_len, nseg, j);
        const size_t sn = send_off + split_offset(send_len, nseg, j + 1) - so;
        const size_t ro = recv_off + split_offset(recv_len, nseg, j);
        const size_t rn = recv_off + split_offset(recv_len, nseg, j + 1) - ro;
        window.make_room();
        RequestId ids[2];
        int k = 0;
        if (sn) ids[k++] = phase.isend(right, step, at(data, so * es), sn * es);
        if (rn)
          ids[k++] = reducing ? phase.irecv_reduce(left, step, at(data, ro * es), rn * es)
                              : phase.irecv(left, step, at(data, ro * es), rn * es);
        window.push(ids, k);
      }
    }
  }
  window.drain();
}

}  // namespace braid::comm
