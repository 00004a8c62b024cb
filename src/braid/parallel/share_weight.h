// The weight of a rank's gradient when the ranks take uneven shares of a global batch of G
// samples (data::batch_share, sampler.h's step blocks). Rank r's loss is the mean over its
// own n_r samples, so weighting its gradient by w n_r / G before the mean over the w ranks
// gives the mean over all G samples:
//
//   (1/w) sum_r (w n_r / G) (1/n_r) sum_{i in r} g_i = (1/G) sum_i g_i.
//
// Folded into the loss gradient's scale, every sample's dL/dlogits carries the same w / G
// whatever its rank's share (so SyncBatchNorm's summed backward statistics stay right too).
// Exactly 1 where the shares are equal (w n_r = G) or no global batch is set (G = 0): those
// runs keep their bits.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "data/loader.h"
#include "data/sampler.h"

namespace braid::parallel {

inline float share_weight(int64_t global_batch, int rank, int world) {
  if (global_batch <= 0) return 1.0f;
  const int64_t n = data::batch_share(global_batch, rank, world);
  return static_cast<float>(static_cast<double>(n * world) / static_cast<double>(global_batch));
}

// An error unless `batch` holds rank `rank`'s share of the global batch (when one is set):
// a loader and a strategy that disagree would train on a wrongly weighted mean.
inline void check_batch_share(const data::Batch& batch, int64_t global_batch, int rank, int world,
                              std::string_view strategy) {
  if (global_batch <= 0) return;
  const int64_t share = data::batch_share(global_batch, rank, world);
  BRAID_CHECK(batch.size == share, strategy, ": rank ", rank, " of ", world, " takes ", share,
              " samples of a global batch of ", global_batch, ", but its batch holds ", batch.size,
              " (the loader and the strategy disagree on the global batch)");
}

}  // namespace braid::parallel
