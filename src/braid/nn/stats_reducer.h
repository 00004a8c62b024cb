// StatsReducer: how a normalisation layer combines its per-channel statistics with the
// ranks that hold the rest of the batch (SyncBatchNorm). nn/ knows nothing of
// communication; parallel/group_stats_reducer.h implements this over a comm::Group, and a
// test may implement it over anything.
//
// Values are doubles: the layers accumulate their per-channel sums in double, and
// rounding them to float before combining would throw away the precision that the
// one-process layer keeps (docs/ARCHITECTURE.md, "Layers": comm/ moves and reduces bytes of
// any dtype, f64 included).
//
// Contract: both calls are collective. Every rank of the reducer calls them in the same
// order with the same count, and the results are bitwise identical on every rank, so
// every rank normalises with the same statistics and keeps the same running statistics.
//
// Thread safety: called from the compute thread only, one call at a time. An
// implementation must not share its channel with communication that another thread
// drives meanwhile (a gradient allreduce overlapping backward): it uses its own.
#pragma once

#include <cstddef>

namespace braid::nn {

class StatsReducer {
 public:
  virtual ~StatsReducer() = default;

  // Ranks taking part (>= 1); allgather's recv holds size() * count values.
  virtual int size() const = 0;
  // recv[r*count, (r+1)*count) = rank r's send[0, count). send and recv do not overlap.
  virtual void allgather(const double* send, double* recv, size_t count) = 0;
  // data[i] = sum over ranks of data[i], in place.
  virtual void sum(double* data, size_t count) = 0;
};

}  // namespace braid::nn
