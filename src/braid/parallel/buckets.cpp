#include "parallel/buckets.h"

#include <algorithm>

namespace braid::parallel {

std::vector<FloatRange> bucket_ranges(const nn::ParamSet& params, size_t first_bytes, size_t bytes,
                                      size_t first_id, size_t end_id) {
  std::vector<FloatRange> out;
  const size_t n = std::min(end_id, params.layout().size());
  if (first_id >= n) return out;
  int64_t end = n == params.layout().size() ? params.size() : params.range_begin(n);
  size_t cap = std::min(first_bytes, bytes);
  for (size_t id = n; id-- > first_id;) {
    const int64_t begin = params.range_begin(id);
    const bool full = static_cast<size_t>(end - begin) * sizeof(float) >= cap;
    if (full || id == first_id) {
      out.push_back({begin, end});
      end = begin;
      cap = bytes;
    }
  }
  return out;
}

}  // namespace braid::parallel
