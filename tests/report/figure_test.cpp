// The layout: which panels a run gets, where its points land in pixels, what the texts say,
// and that a long curve is thinned to its area's columns.
#include "report/figure.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace braid::report {
namespace {

RunCurves full_run() {
  RunCurves c;
  c.source = "run/metrics.jsonl";
  for (int s = 1; s <= 50; ++s) {
    c.train_loss.add(s * 20, 2.0 / s);
    c.lr.add(s * 20, 0.001);
    c.samples_per_s.add(s * 20, 7000 + s);
  }
  for (int s = 1; s <= 5; ++s) {
    c.eval_loss.add(s * 200, 1.0 / s);
    c.eval_accuracy.add(s * 200, 0.7 + s * 0.03);
  }
  c.train_records = 50;
  c.eval_records = 5;
  return c;
}

std::vector<std::string> titles(const Figure& f) {
  std::vector<std::string> out;
  for (const Panel& p : f.panels) out.push_back(p.title);
  return out;
}

bool has_text(const Figure& f, const std::string& s) {
  return std::any_of(f.texts.begin(), f.texts.end(), [&](const Text& t) { return t.text == s; });
}

bool inside(const Rect& outer, const Rect& inner) {
  return inner.x >= outer.x && inner.y >= outer.y && inner.x + inner.w <= outer.x + outer.w &&
         inner.y + inner.h <= outer.y + outer.h;
}

bool overlap(const Rect& a, const Rect& b) {
  return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

TEST(Figure, ARunGetsAPanelForEachQuantityItLogged) {
  const Figure f = layout_figure(full_run(), {});
  EXPECT_EQ(f.width, 1200);
  EXPECT_EQ(f.height, 800);
  EXPECT_EQ(titles(f),
            (std::vector<std::string>{"loss", "eval accuracy", "throughput", "learning rate"}));
  ASSERT_EQ(f.panels[0].curves.size(), 2u);
  EXPECT_EQ(f.panels[0].curves[0].name, "train loss");
  EXPECT_EQ(f.panels[0].curves[1].name, "eval loss");
  EXPECT_FALSE(f.panels[0].curves[0].color == f.panels[0].curves[1].color);
  for (const char* s : {"train loss", "eval loss", "eval accuracy", "samples/s", "step", "loss",
                        "accuracy", "learning rate"})
    EXPECT_TRUE(has_text(f, s)) << s;
  // 2 x 2, inside the padding, apart, sharing the steps' axis
  const Rect figure{kPadding, kPadding, 1200 - 2 * kPadding, 800 - 2 * kPadding};
  for (size_t i = 0; i < f.panels.size(); ++i) {
    const Mapping& m = f.panels[i].map;
    EXPECT_TRUE(inside(figure, m.area)) << i;
    EXPECT_GT(m.area.w, 400);
    EXPECT_GT(m.area.h, 200);
    EXPECT_EQ(m.x.ticks, f.panels[0].map.x.ticks);
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(overlap(m.area, f.panels[j].map.area));
    for (const Curve& c : f.panels[i].curves)
      for (const Point& p : c.points)
        ASSERT_TRUE(p.x >= m.area.x && p.x <= m.area.x + m.area.w && p.y >= m.area.y &&
                    p.y <= m.area.y + m.area.h)
            << f.panels[i].title << " " << c.name << " " << p.x << "," << p.y;
  }
  EXPECT_EQ(f.panels[0].map.area.y, f.panels[1].map.area.y);  // side by side
  EXPECT_EQ(f.panels[0].map.area.x, f.panels[2].map.area.x);  // one above the other
}

TEST(Figure, ALanguageModelWithoutAccuracyGetsNoAccuracyPanel) {
  RunCurves c;
  c.train_loss.add(10, 3);
  c.train_loss.add(20, 2);
  c.tokens_per_s.add(10, 50000);
  c.eval_loss.add(20, 2.5);
  const Figure f = layout_figure(c, {});
  EXPECT_EQ(titles(f), (std::vector<std::string>{"loss", "throughput"}));
  EXPECT_TRUE(has_text(f, "tokens/s"));
  EXPECT_EQ(f.panels[0].map.area.y, f.panels[1].map.area.y);  // side by side
}

// A loss from 2 to 0 over steps 0 to 1000 spans its axes exactly: the first point is the
// area's top-left corner, the last its bottom-right, the middle one its centre.
TEST(Figure, MapsTheFirstAndLastPointToTheAreasCorners) {
  RunCurves c;
  c.train_loss.add(0, 2);
  c.train_loss.add(500, 1);
  c.train_loss.add(1000, 0);
  FigureOptions options;
  options.title = "a run";
  const Figure f = layout_figure(c, options);
  ASSERT_EQ(f.panels.size(), 1u);
  const Mapping& m = f.panels[0].map;
  EXPECT_EQ(m.x.lo, 0);
  EXPECT_EQ(m.x.hi, 1000);
  EXPECT_EQ(m.y.lo, 0);
  EXPECT_EQ(m.y.hi, 2);
  const std::vector<Point>& p = f.panels[0].curves.at(0).points;
  ASSERT_EQ(p.size(), 3u);
  EXPECT_DOUBLE_EQ(p[0].x, m.area.x);
  EXPECT_DOUBLE_EQ(p[0].y, m.area.y);
  EXPECT_DOUBLE_EQ(p[1].x, m.area.x + m.area.w / 2);
  EXPECT_DOUBLE_EQ(p[1].y, m.area.y + m.area.h / 2);
  EXPECT_DOUBLE_EQ(p[2].x, m.area.x + m.area.w);
  EXPECT_DOUBLE_EQ(p[2].y, m.area.y + m.area.h);
  // one panel fills the figure but for the margins: 78 left, 28 right of the padding
  EXPECT_DOUBLE_EQ(m.area.x, kPadding + 78);
  EXPECT_DOUBLE_EQ(m.area.x + m.area.w, 1200 - kPadding - 28);
  EXPECT_TRUE(has_text(f, "a run"));
  EXPECT_TRUE(f.panels[0].curves[0].markers);  // three points: dots too
}

TEST(Figure, ALongCurveIsThinnedToItsColumns) {
  RunCurves c;
  for (int s = 1; s <= 100000; ++s) c.train_loss.add(s, 1 + std::sin(s * 0.37));
  const Figure f = layout_figure(c, {});
  const Curve& curve = f.panels.at(0).curves.at(0);
  EXPECT_LE(curve.points.size(), 2 * static_cast<size_t>(f.panels[0].map.area.w + 1) + 2);
  EXPECT_GT(curve.points.size(), static_cast<size_t>(f.panels[0].map.area.w));
  EXPECT_FALSE(curve.markers);
}

TEST(Figure, TextsAreCleanedAndLongTitlesCut) {
  RunCurves c;
  c.train_loss.add(1, 1);
  FigureOptions options;
  options.title = "bad\x01name\xff";
  Figure f = layout_figure(c, options);
  EXPECT_TRUE(has_text(f, "bad name\xEF\xBF\xBD"));
  c.train_loss.name = "lo\x02ss\xc3";  // a series named by hand, not by the reader
  f = layout_figure(c, options);
  EXPECT_TRUE(has_text(f, "lo ss\xEF\xBF\xBD"));  // the legend
  EXPECT_EQ(f.panels.at(0).curves.at(0).name, "lo ss\xEF\xBF\xBD");
  options.title = std::string(1000, 'x');
  f = layout_figure(c, options);
  const auto title = std::find_if(f.texts.begin(), f.texts.end(),
                                  [](const Text& t) { return t.text.find("xxx") == 0; });
  ASSERT_NE(title, f.texts.end());
  EXPECT_LT(title->text.size(), 200u);
  EXPECT_EQ(title->text.substr(title->text.size() - 3), "\xE2\x80\xA6");
}

TEST(Figure, NothingToDrawOrABadSizeIsAnError) {
  RunCurves c;
  c.source = "run/metrics.jsonl";
  c.train_records = 3;  // every loss null
  try {
    layout_figure(c, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run/metrics.jsonl: no finite value"), std::string::npos)
        << e.what();
  }
  c.train_loss.add(1, 1);
  EXPECT_THROW(layout_figure(c, {.width = 100, .height = 800, .title = ""}), Error);
  EXPECT_THROW(layout_figure(c, {.width = 1200, .height = 100000, .title = ""}), Error);
  EXPECT_NO_THROW(layout_figure(full_run(), {.width = 600, .height = 400, .title = "small"}));
}

}  // namespace
}  // namespace braid::report
