// A linear axis with "nice" ticks, and the mapping from data to pixels.
//
// nice_axis picks the tick step as the smallest of 1, 2 or 5 times a power of ten that
// keeps the ticks at most `max_ticks` intervals apart over the data, then widens the range
// outwards to whole steps, so the first and last tick sit on the axis' ends and every data
// value lies inside. A range of one value (a constant learning rate, a single evaluation)
// is widened around it first: by half its magnitude, or to [-1, 1] around zero.
#pragma once

#include <string>
#include <vector>

namespace braid::report {

struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 1;
  std::vector<double> ticks;  // lo, lo + step, ..., hi

  // A tick's label, with as many decimals as the step needs: "0.25", "1000", "0.00005";
  // past six decimals or from 1e7 on, one exponent for the whole axis: "2.5e-7", "1.5e7".
  std::string label(double value) const;
};

// Requires finite lo <= hi and max_ticks >= 1.
Axis nice_axis(double lo, double hi, int max_ticks = 6);

// A rectangle in pixels: x to the right, y downwards, (x, y) its top-left corner.
struct Rect {
  double x = 0;
  double y = 0;
  double w = 0;
  double h = 0;
};

// Data to pixels in `area`: x's axis left to right, y's bottom to top.
struct Mapping {
  Axis x;
  Axis y;
  Rect area;

  double px(double data_x) const;
  double py(double data_y) const;
};

}  // namespace braid::report
