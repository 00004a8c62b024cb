#include "parallel/buckets.h"

#include <algorithm>

namespace braid::parallel {

std::vector<FloatRange> bucket_ranges(const nn::ParamSet& params, size_t first_bytes,
                                      size_t bytes) {
  std::vector<FloatRange> out;
  const size_t n = params.layout().size();
  int64_t end = params.size();
  size_t cap = std::min(first_bytes, bytes);
  for (size_t id = n; id-- > 0;) {
    const int64_t begin = params.range_begin(id);
    const bool full = static_cast<size_t>(end - begin) * sizeof(float) >= cap;
    if (full || id == 0) {
      out.push_back({begin, end});
      end = begin;
      cap = bytes;
    }
  }
  return out;
}

}  // namespace braid::parallel
