// Thins a curve to what its pixels can show, so a 100,000-step run draws fast and stays a
// small file. Within one pixel column a polyline only moves up and down; the lowest and
// highest points of each run of consecutive points in a column (floor of x) carry that
// span, so they are kept, in their order (one point where they coincide), with the curve's
// first and last point besides. The result has at most two points per column run, plus
// those two, and is the input itself when no column holds more than two.
#pragma once

#include <vector>

#include "report/run_curves.h"

namespace braid::report {

// `pixels`: a curve in pixel coordinates, in drawing order.
std::vector<Point> downsample(const std::vector<Point>& pixels);

}  // namespace braid::report
