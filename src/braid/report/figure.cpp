#include "report/figure.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "report/downsample.h"
#include "report/text.h"

namespace braid::report {
namespace {

// Colours: an evaluation is orange in every panel, its weight average green.
constexpr Color kBlue{31, 119, 180}, kOrange{255, 127, 14}, kGreen{44, 160, 44},
    kPurple{148, 103, 189}, kBrown{140, 86, 75}, kRed{214, 39, 40};
constexpr Color kInk{34, 34, 34}, kGrid{230, 230, 230}, kFrame{128, 128, 128};

// A cell's margins around its plotting area, in pixels: the panel's title and legend rows
// above it, tick labels and the axis' name left of and below it.
constexpr double kFigureTitleRow = 36;
constexpr double kPanelTitleRow = 20, kLegendRow = 18;
constexpr double kLeft = 78, kRight = 28, kBottom = 44;
constexpr double kSwatch = 18, kLegendGap = 16;
constexpr double kTitleSize = 18, kPanelTitleSize = 14, kLabelSize = 12, kTickSize = 11;
constexpr size_t kMarkersUpTo = 30;  // points; a longer series is a line alone

struct PanelSpec {
  std::string title;
  std::string y_label;
  std::vector<std::pair<const Series*, Color>> series;  // those with points
};

std::vector<PanelSpec> panel_specs(const RunCurves& c) {
  std::vector<PanelSpec> all = {
      {"loss",
       "loss",
       {{&c.train_loss, kBlue}, {&c.eval_loss, kOrange}, {&c.eval_ema_loss, kGreen}}},
      {"eval accuracy", "accuracy", {{&c.eval_accuracy, kOrange}, {&c.eval_ema_accuracy, kGreen}}},
      {"throughput", "", {{&c.samples_per_s, kPurple}, {&c.tokens_per_s, kBrown}}},
      {"learning rate", "learning rate", {{&c.lr, kRed}}},
  };
  std::vector<PanelSpec> specs;
  for (PanelSpec& spec : all) {
    std::erase_if(spec.series, [](const auto& s) { return s.first->empty(); });
    if (spec.series.empty()) continue;
    if (spec.y_label.empty())  // throughput: its units
      for (const auto& [series, color] : spec.series)
        spec.y_label += (spec.y_label.empty() ? "" : ", ") + series->name;
    specs.push_back(std::move(spec));
  }
  return specs;
}

// The legend's entries' rows, as the index of the first entry of each row.
std::vector<size_t> legend_rows(const PanelSpec& spec, double width) {
  std::vector<size_t> starts = {0};
  double x = 0;
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const double w = kSwatch + 6 + text_width(spec.series[i].first->name, kLabelSize);
    if (x > 0 && x + w > width) {
      starts.push_back(i);
      x = 0;
    }
    x += w + kLegendGap;
  }
  return starts;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

int tick_count(double pixels, double per_tick, int most) {
  return std::clamp(static_cast<int>(pixels / per_tick), 2, most);
}

void add_text(Figure& f, const std::string& s, double x, double y, double size, Anchor anchor,
              bool bold = false, bool vertical = false) {
  f.texts.push_back({clean_text(s), x, y, size, anchor, bold, vertical, kInk});
}

void add_axes(Figure& f, const Mapping& m, const std::string& x_name, const std::string& y_name,
              double cell_x) {
  const Rect& a = m.area;
  const double bottom = a.y + a.h;
  for (const double t : m.x.ticks) {
    const double x = m.px(t);
    f.lines.push_back({x, a.y, x, bottom, kGrid, 1});
    f.lines.push_back({x, bottom, x, bottom + 4, kFrame, 1});
    add_text(f, m.x.label(t), x, bottom + 17, kTickSize, Anchor::middle);
  }
  for (const double t : m.y.ticks) {
    const double y = m.py(t);
    f.lines.push_back({a.x, y, a.x + a.w, y, kGrid, 1});
    f.lines.push_back({a.x - 4, y, a.x, y, kFrame, 1});
    add_text(f, m.y.label(t), a.x - 7, y + 4, kTickSize, Anchor::end);
  }
  f.lines.push_back({a.x, a.y, a.x + a.w, a.y, kFrame, 1});  // the frame
  f.lines.push_back({a.x, bottom, a.x + a.w, bottom, kFrame, 1});
  f.lines.push_back({a.x, a.y, a.x, bottom, kFrame, 1});
  f.lines.push_back({a.x + a.w, a.y, a.x + a.w, bottom, kFrame, 1});
  add_text(f, x_name, a.x + a.w / 2, bottom + 36, kLabelSize, Anchor::middle);
  add_text(f, y_name, cell_x + 16, a.y + a.h / 2, kLabelSize, Anchor::middle, false, true);
}

void add_legend(Figure& f, const PanelSpec& spec, const Rect& area, double top) {
  const std::vector<size_t> starts = legend_rows(spec, area.w);
  for (size_t row = 0; row < starts.size(); ++row) {
    const size_t end = row + 1 < starts.size() ? starts[row + 1] : spec.series.size();
    const double baseline = top + (row + 1) * kLegendRow - 4;
    double x = area.x;
    for (size_t i = starts[row]; i < end; ++i) {
      const auto& [series, color] = spec.series[i];
      f.lines.push_back({x, baseline - 4, x + kSwatch, baseline - 4, color, 2.5});
      add_text(f, series->name, x + kSwatch + 6, baseline, kLabelSize, Anchor::start);
      x += kSwatch + 6 + text_width(series->name, kLabelSize) + kLegendGap;
    }
  }
}

Curve make_curve(const Series& s, Color color, const Mapping& m) {
  std::vector<Point> pixels;
  pixels.reserve(s.points.size());
  for (const Point& p : s.points) pixels.push_back({m.px(p.x), m.py(p.y)});
  return {clean_text(s.name), color, downsample(pixels), s.points.size() <= kMarkersUpTo};
}

}  // namespace

Figure layout_figure(const RunCurves& c, const FigureOptions& o) {
  BRAID_CHECK(o.width >= 600 && o.width <= 8000 && o.height >= 400 && o.height <= 8000,
              "a figure of ", o.width, "x", o.height, " pixels: the size must be within 600x400 ",
              "and 8000x8000");
  const std::vector<PanelSpec> specs = panel_specs(c);
  BRAID_CHECK(!specs.empty(), c.source, ": no finite value to plot in its ", c.train_records,
              " train and ", c.eval_records, " eval records");
  Figure f;
  f.width = o.width;
  f.height = o.height;
  double top = kPadding;
  if (!o.title.empty()) {
    const std::string title = fit_text(o.title, o.width - 2 * kPadding, kTitleSize);
    add_text(f, title, o.width / 2.0, kPadding + 22, kTitleSize, Anchor::middle, true);
    top += kFigureTitleRow;
  }
  const int cols = specs.size() == 1 ? 1 : 2;
  const int rows = static_cast<int>(specs.size() + 1) / 2;
  const double cell_w = (o.width - 2 * kPadding) / cols;
  const double cell_h = (o.height - kPadding - top) / rows;
  const double area_w = cell_w - kLeft - kRight;
  size_t legend_rows_most = 1;  // the same for every panel, so their areas line up
  for (const PanelSpec& spec : specs)
    legend_rows_most = std::max(legend_rows_most, legend_rows(spec, area_w).size());
  const double area_top = kPanelTitleRow + legend_rows_most * kLegendRow + 8;
  BRAID_CHECK(area_w >= 60 && cell_h - area_top - kBottom >= 30, "a figure of ", o.width, "x",
              o.height, " pixels is too small for its ", specs.size(), " panels");

  Range x_range;  // shared: the panels' steps line up
  for (const PanelSpec& spec : specs)
    for (const auto& [series, color] : spec.series)
      for (const Point& p : series->points) x_range.add(p.x);
  for (size_t i = 0; i < specs.size(); ++i) {
    const PanelSpec& spec = specs[i];
    const Rect cell{kPadding + static_cast<double>(i % cols) * cell_w,
                    top + static_cast<double>(i / cols) * cell_h, cell_w, cell_h};
    Panel panel;
    panel.title = spec.title;
    Mapping& m = panel.map;
    m.area = {cell.x + kLeft, cell.y + area_top, area_w, cell.h - area_top - kBottom};
    Range y_range;
    for (const auto& [series, color] : spec.series)
      for (const Point& p : series->points) y_range.add(p.y);
    m.x = nice_axis(x_range.lo, x_range.hi, tick_count(m.area.w, 90, 10));
    m.y = nice_axis(y_range.lo, y_range.hi, tick_count(m.area.h, 45, 8));
    add_axes(f, m, c.x_name, spec.y_label, cell.x);
    add_text(f, spec.title, m.area.x, cell.y + 16, kPanelTitleSize, Anchor::start, true);
    add_legend(f, spec, m.area, cell.y + kPanelTitleRow);
    for (const auto& [series, color] : spec.series)
      panel.curves.push_back(make_curve(*series, color, m));
    f.panels.push_back(std::move(panel));
  }
  return f;
}

}  // namespace braid::report
