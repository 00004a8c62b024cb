#include "report/downsample.h"

#include <algorithm>
#include <cmath>

namespace braid::report {

std::vector<Point> downsample(const std::vector<Point>& pixels) {
  std::vector<Point> out;
  const size_t n = pixels.size();
  for (size_t begin = 0; begin < n;) {
    const double column = std::floor(pixels[begin].x);
    size_t end = begin, low = begin, high = begin;
    for (; end < n && std::floor(pixels[end].x) == column; ++end) {
      if (pixels[end].y < pixels[low].y) low = end;
      if (pixels[end].y > pixels[high].y) high = end;
    }
    // The indices kept from this run, in order; the curve's ends join them.
    size_t keep[4] = {low, high, begin == 0 ? begin : low, end == n ? end - 1 : high};
    std::sort(keep, keep + 4);
    for (size_t k = 0; k < 4; ++k)
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(pixels[keep[k]]);
    begin = end;
  }
  return out;
}

}  // namespace braid::report
