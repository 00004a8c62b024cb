// `braid plan scaling --svg`: efficiency against ranks, one curve per strategy family, on
// report/'s figure primitives and SVG writer (a log2 x axis: ranks double per point).
#include "cli/plan_plot.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "report/axis.h"
#include "report/figure.h"
#include "report/svg_writer.h"

namespace braid::cli {

void write_scaling_svg(const plan::ScalingReport& r, const std::string& path) {
  using namespace report;
  const Color palette[] = {{31, 119, 180},  {255, 127, 14},  {44, 160, 44},
                           {214, 39, 40},   {148, 103, 189}, {140, 86, 75},
                           {227, 119, 194}, {127, 127, 127}, {188, 189, 34}};
  const Color ink{34, 34, 34}, grid{230, 230, 230};
  Figure f;
  f.width = 1000;
  f.height = 640;
  const double max_log = r.ranks.empty() ? 1 : std::log2(std::max(2, r.ranks.back()));
  Panel panel;
  panel.title = "predicted efficiency, " + r.model + ", " + std::to_string(r.batch_per_rank) +
                " samples a rank";
  panel.map.x = nice_axis(0, max_log, 12);
  panel.map.x.step = 1;
  panel.map.x.ticks.clear();
  for (double t = 0; t <= panel.map.x.hi + 1e-9; t += 1) panel.map.x.ticks.push_back(t);
  panel.map.y = nice_axis(0, 1.0, 5);
  panel.map.area = {80, 60, 640, 500};
  const Mapping& m = panel.map;
  for (double t : m.y.ticks) {
    f.lines.push_back({m.area.x, m.py(t), m.area.x + m.area.w, m.py(t), grid, 1});
    f.texts.push_back(
        {m.y.label(t * 100) + " %", m.area.x - 6, m.py(t) + 4, 12, Anchor::end, false, false, ink});
  }
  for (double t : m.x.ticks) {
    f.lines.push_back({m.px(t), m.area.y, m.px(t), m.area.y + m.area.h, grid, 1});
    f.texts.push_back({std::to_string(1 << static_cast<int>(t)), m.px(t), m.area.y + m.area.h + 18,
                       12, Anchor::middle, false, false, ink});
  }
  f.texts.push_back({"ranks", m.area.x + m.area.w / 2, m.area.y + m.area.h + 40, 13, Anchor::middle,
                     false, false, ink});
  f.texts.push_back({panel.title, m.area.x, 36, 15, Anchor::start, true, false, ink});
  int i = 0;
  double legend_y = m.area.y + 10;
  for (const plan::ScalingFamily& fam : r.families) {
    if (fam.points.empty()) continue;
    const Color color = palette[i++ % 9];
    Curve c;
    c.name = fam.name;
    c.color = color;
    c.markers = true;
    for (const plan::ScalingPoint& p : fam.points)
      c.points.push_back({m.px(std::log2(p.ranks)), m.py(std::min(1.0, p.efficiency))});
    panel.curves.push_back(c);
    f.lines.push_back(
        {m.area.x + m.area.w + 20, legend_y, m.area.x + m.area.w + 44, legend_y, color, 3});
    f.texts.push_back(
        {fam.name, m.area.x + m.area.w + 50, legend_y + 4, 13, Anchor::start, false, false, ink});
    legend_y += 22;
  }
  f.panels.push_back(panel);
  write_svg(f, path);
}

}  // namespace braid::cli
