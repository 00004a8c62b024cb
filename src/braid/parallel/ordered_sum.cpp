#include "parallel/ordered_sum.h"

#include <cstring>

namespace braid::parallel {

void ordered_add(float* sum, const float* term, int64_t n, bool first) {
  if (first) {
    std::memcpy(sum, term, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) sum[i] += term[i];
}

void scale_into(float* dst, const float* src, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * factor;
}

}  // namespace braid::parallel
