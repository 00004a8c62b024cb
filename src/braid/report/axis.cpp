#include "report/axis.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/error.h"

namespace braid::report {
namespace {

// A step's tolerance: 0.6 / 0.2 is 2.9999999999999996, and its floor must still be 3.
constexpr double kSlack = 1e-9;

}  // namespace

Axis nice_axis(double lo, double hi, int max_ticks) {
  BRAID_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && std::isfinite(hi - lo),
              "nice_axis: bad range [", lo, ", ", hi, "]");
  BRAID_CHECK(max_ticks >= 1, "nice_axis: max_ticks ", max_ticks);
  const double magnitude = std::max(std::abs(lo), std::abs(hi));
  if (hi - lo <= 1e-12 * magnitude) {  // one value: widen around it
    const double pad = magnitude > 0 ? magnitude / 2 : 1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / max_ticks;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  Axis a;
  // 1, 2, 5 times a power of ten, the smallest whose whole steps around the data number at
  // most max_ticks; widening can add an interval at each end, so the first may not do.
  for (int i = 0;; ++i) {
    const double step = power * (i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : 5);
    if (i % 3 == 2) power *= 10;
    if (step < raw * (1 - kSlack)) continue;
    const auto first = static_cast<int64_t>(std::floor(lo / step + kSlack));
    const auto last = static_cast<int64_t>(std::ceil(hi / step - kSlack));
    if (last - first > max_ticks) continue;
    a.step = step;
    for (int64_t n = first; n <= last; ++n) a.ticks.push_back(static_cast<double>(n) * step);
    break;
  }
  a.lo = a.ticks.front();
  a.hi = a.ticks.back();
  return a;
}

std::string Axis::label(double value) const {
  if (std::abs(value) < step * kSlack) return "0";  // not "-0.00" nor "0.0e-7"
  char buf[64];
  const double magnitude = std::max(std::abs(lo), std::abs(hi));
  const int step_exp = static_cast<int>(std::floor(std::log10(step) + kSlack));
  const int decimals = std::max(0, -step_exp);
  if (decimals <= 6 && magnitude < 1e7) {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  } else {
    // One exponent for the whole axis, the largest value's, and the step's digits:
    // 1.5e7, 2.0e7; 2.5e-7, 0.5e-7.
    const int exp = static_cast<int>(std::floor(std::log10(magnitude)));
    const int digits = std::clamp(exp - step_exp, 0, 15);
    std::snprintf(buf, sizeof buf, "%.*fe%d", digits, value / std::pow(10.0, exp), exp);
  }
  return buf;
}

double Mapping::px(double data_x) const {
  return area.x + (data_x - x.lo) / (x.hi - x.lo) * area.w;
}

double Mapping::py(double data_y) const {
  return area.y + area.h - (data_y - y.lo) / (y.hi - y.lo) * area.h;
}

}  // namespace braid::report
