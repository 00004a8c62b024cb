// Binary-blocks allreduce (Rabenseifner and Traeff 2004, as in gloo's halving-doubling):
// halving-doubling for any group size without folding whole buffers.
//
// The n ranks are cut into blocks whose sizes are the binary digits of n, largest first
// (n = 7: ranks 0-3, 4-5, 6). The count is split into P pieces, P the largest block's
// size, so every block's ranges are unions of pieces. Then:
//   1. each block reduce-scatters internally by recursive halving;
//   2. from the smallest block up, a block adds in what the next smaller block holds for
//      its ranges (each of its ranks receives from one rank there) and sends its ranges,
//      cut into the next larger block's ranges, up; the largest block ends with the final
//      values, each element combined once, in a fixed order, by one rank;
//   3. from the largest block down, each block sends the final ranges back to the ranks
//      of the next smaller block that sent them up;
//   4. each block all-gathers internally by recursive doubling.
// A small block's ranks carry more data than the others; when n has few binary digits
// (n = 2^k + 2^j) this is close to halving-doubling's cost.
#include <bit>
#include <vector>

#include "comm/algorithms.h"

namespace braid::comm {

namespace {

struct Block {
  int first = 0, size = 0;
};

}  // namespace

void allreduce_binary_blocks(const CallContext& ctx, void* data, size_t count) {
  const int n = ctx.size(), r = ctx.rank();
  std::array<Block, 32> blocks{};
  int nblocks = 0, mine = 0;
  for (int bit = static_cast<int>(std::bit_floor(static_cast<unsigned>(n))), first = 0; bit >= 1;
       bit /= 2) {
    if (!(n & bit)) continue;
    if (r >= first && r < first + bit) mine = nblocks;
    blocks[static_cast<size_t>(nblocks++)] = {first, bit};
    first += bit;
  }
  const Block me = blocks[static_cast<size_t>(mine)];
  const size_t pieces = static_cast<size_t>(blocks[0].size);
  const int index = r - me.first;

  HalvingBlock hb;
  hb.first = me.first;
  hb.size = me.size;
  hb.index = index;
  hb.pieces = pieces;
  halving_reduce_scatter(ctx.phase(0), hb, data, count);

  const size_t es = ctx.elem();
  auto offset = [&](size_t piece) { return split_offset(count, pieces, piece) * es; };
  // Range (in pieces) owned by index i of a block of size m.
  auto range_lo = [&](int i, int m) {
    return static_cast<size_t>(i) * pieces / static_cast<size_t>(m);
  };
  const size_t lo = range_lo(index, me.size), hi = range_lo(index + 1, me.size);

  const bool has_smaller = mine + 1 < nblocks, has_larger = mine > 0;
  const Block smaller = has_smaller ? blocks[static_cast<size_t>(mine + 1)] : Block{};
  const Block larger = has_larger ? blocks[static_cast<size_t>(mine - 1)] : Block{};
  const int down_ratio = has_smaller ? me.size / smaller.size : 1;  // my ranks per smaller rank
  const int up_ratio = has_larger ? larger.size / me.size : 1;      // larger ranks per my rank
  const int smaller_peer = has_smaller ? smaller.first + index / down_ratio : -1;
  std::vector<RequestId> ids;

  // 2. Up: add the smaller blocks' partial sums in, pass the result up.
  const CallContext up = ctx.phase(1 * kPhaseSteps);
  if (has_smaller)
    up.wait(up.irecv_reduce(smaller_peer, 0, at(data, offset(lo)), offset(hi) - offset(lo)));
  if (has_larger) {
    for (int k = 0; k < up_ratio; ++k) {
      const int j = index * up_ratio + k;
      const size_t a = range_lo(j, larger.size), b = range_lo(j + 1, larger.size);
      ids.push_back(up.isend(larger.first + j, 0, at(data, offset(a)), offset(b) - offset(a)));
    }
    up.wait(ids);
    ids.clear();
  }

  // 3. Down: final values come back from the larger block and go on to the smaller one.
  const CallContext down = ctx.phase(2 * kPhaseSteps);
  if (has_larger) {
    for (int k = 0; k < up_ratio; ++k) {
      const int j = index * up_ratio + k;
      const size_t a = range_lo(j, larger.size), b = range_lo(j + 1, larger.size);
      ids.push_back(down.irecv(larger.first + j, 0, at(data, offset(a)), offset(b) - offset(a)));
    }
    down.wait(ids);
  }
  if (has_smaller)
    down.wait(down.isend(smaller_peer, 0, at(data, offset(lo)), offset(hi) - offset(lo)));

  doubling_allgather(ctx.phase(3 * kPhaseSteps), hb, data, count);
}

}  // namespace braid::comm
