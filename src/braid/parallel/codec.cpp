#include "parallel/codec.h"

#include <algorithm>
#include <cstring>

#include "comm/group.h"

namespace braid::parallel {

double dense_allreduce_bytes(int64_t floats, int ranks) {
  if (ranks <= 1) return 0;
  return 2.0 * (ranks - 1) / ranks * static_cast<double>(floats) * sizeof(float);
}

void GradientCodec::reduce_scatter(comm::Group& g, size_t bucket, float* grad, int64_t count,
                                   float* chunk_sum, int64_t chunk, int64_t step) {
  allreduce(g, bucket, grad, count, step);
  const int64_t from = std::min<int64_t>(count, g.rank() * chunk);
  const int64_t mine = std::clamp<int64_t>(count - from, 0, chunk);
  std::memcpy(chunk_sum, grad + from, static_cast<size_t>(mine) * sizeof(float));
  std::fill(chunk_sum + mine, chunk_sum + chunk, 0.0f);
}

CodecReport GradientCodec::take_report() {
  const CodecReport out = report_;
  report_ = {};
  return out;
}

}  // namespace braid::parallel
