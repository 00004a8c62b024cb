// A run's curves laid out as a figure, whatever the file it is written to: one panel per
// quantity the run logged (loss, train and eval; eval accuracy; throughput; learning
// rate), side by side or two by two, sharing the x axis (steps). Every decision is made
// here: the ranges and nice ticks (axis.h), the pixel of every point, curves thinned to
// their pixels (downsample.h), where each title, label and legend entry goes. A writer
// only draws the primitives, in order: background, lines, curves, texts.
//
// Nothing is drawn within `kPadding` of the figure's edges. Every text is valid UTF-8
// without control characters (what is not becomes U+FFFD or a space), so a writer needs
// only its own escaping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/axis.h"
#include "report/run_curves.h"

namespace braid::report {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Color&) const = default;
};

enum class Anchor { start, middle, end };

struct Text {
  std::string text;
  double x = 0, y = 0;  // the anchor's point, on the baseline
  double size = 12;     // font size in pixels
  Anchor anchor = Anchor::start;
  bool bold = false;
  bool vertical = false;  // turned a quarter left around (x, y): reads bottom to top
  Color color;
};

struct Line {
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  Color color;
  double width = 1;
};

// A series in pixels, thinned; `markers`: also a dot at each point (a short series, where
// a lone evaluation would otherwise not show).
struct Curve {
  std::string name;
  Color color;
  std::vector<Point> points;
  bool markers = false;
  double width = 1.5;
};

struct Panel {
  std::string title;
  Mapping map;  // its area is the plotting area; every curve lies inside it
  std::vector<Curve> curves;
};

struct Figure {
  int width = 0, height = 0;
  Color background{255, 255, 255};
  std::vector<Line> lines;  // grid, frames, tick marks, legend swatches
  std::vector<Panel> panels;
  std::vector<Text> texts;  // titles, tick labels, axis labels, legend names
};

inline constexpr double kPadding = 12;  // pixels left empty around the figure

struct FigureOptions {
  int width = 1200;  // pixels, 600 to 8000
  int height = 800;  // pixels, 400 to 8000
  std::string title;
};

// Throws braid::Error where the run has no point to draw or the size is out of bounds.
Figure layout_figure(const RunCurves& curves, const FigureOptions& options);

}  // namespace braid::report
