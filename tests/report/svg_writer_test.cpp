// The SVG writer: exactly the points it was given, every string escaped, one element per
// primitive, and a file.
#include "report/svg_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "temp_dir.h"

namespace braid::report {
namespace {

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

Figure small_figure() {
  Figure f;
  f.width = 300;
  f.height = 200;
  f.lines.push_back({20, 30, 280, 30, {128, 128, 128}, 1});
  Panel p;
  p.title = "loss";
  p.map.area = {20, 30, 260, 150};
  p.curves.push_back({"train loss", {31, 119, 180}, {{20, 180}, {150.26, 105}, {280, 30.04}}});
  f.panels.push_back(p);
  f.texts.push_back({"a title", 150, 20, 18, Anchor::middle, true, false, {34, 34, 34}});
  f.texts.push_back({"loss", 8, 105, 12, Anchor::middle, false, true, {34, 34, 34}});
  return f;
}

TEST(SvgWriter, DrawsACurveThroughExactlyItsPoints) {
  const std::string svg = svg_document(small_figure());
  EXPECT_NE(svg.find("<polyline points=\"20.0,180.0 150.3,105.0 280.0,30.0\" stroke=\"#1f77b4\" "
                     "stroke-width=\"1.5\"><title>train loss</title></polyline>"),
            std::string::npos)
      << svg;
  EXPECT_EQ(count(svg, "<polyline"), 1u);
  EXPECT_EQ(count(svg, "<circle"), 0u);  // no markers asked for
  EXPECT_EQ(count(svg, "<line "), 1u);
  EXPECT_EQ(count(svg, "<text "), 2u);
  EXPECT_EQ(count(svg, "</text>"), 2u);
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 0), 0u);
  EXPECT_NE(svg.find("width=\"300\" height=\"200\" viewBox=\"0 0 300 200\""), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find("<text x=\"150.0\" y=\"20.0\" font-size=\"18.0\" text-anchor=\"middle\" "
                     "fill=\"#222222\" font-weight=\"bold\">a title</text>"),
            std::string::npos);
  EXPECT_NE(svg.find("transform=\"rotate(-90 8.0 105.0)\">loss</text>"), std::string::npos);
}

TEST(SvgWriter, MarksEachPointOfAShortCurve) {
  Figure f = small_figure();
  f.panels[0].curves[0].markers = true;
  const std::string svg = svg_document(f);
  EXPECT_EQ(count(svg, "<circle"), 3u);
  EXPECT_NE(svg.find("<circle cx=\"150.3\" cy=\"105.0\" r=\"2.5\"/>"), std::string::npos);
}

TEST(SvgWriter, EscapesEveryString) {
  EXPECT_EQ(xml_escape("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
  EXPECT_EQ(xml_escape("a & b \"c\" 'd'"), "a &amp; b &quot;c&quot; &apos;d&apos;");
  Figure f = small_figure();
  f.texts[0].text = "<script>alert(1)</script>";
  f.panels[0].title = "<script>alert(2)</script>";
  f.panels[0].curves[0].name = "a<b & \"c\"";
  const std::string svg = svg_document(f);
  EXPECT_EQ(svg.find("<script"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">&lt;script&gt;alert(1)&lt;/script&gt;</text>"), std::string::npos);
  EXPECT_NE(svg.find("<title>&lt;script&gt;alert(2)&lt;/script&gt;</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>a&lt;b &amp; &quot;c&quot;</title>"), std::string::npos);
}

TEST(SvgWriter, WritesTheDocumentOrSaysWhyNot) {
  braid::testing::TempDir tmp;
  const Figure f = small_figure();
  write_svg(f, tmp.file("c.svg"));
  std::ifstream in(tmp.file("c.svg"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), svg_document(f));
  try {
    write_svg(f, tmp.file("missing/c.svg"));
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.file("missing/c.svg")), std::string::npos);
  }
}

}  // namespace
}  // namespace braid::report
