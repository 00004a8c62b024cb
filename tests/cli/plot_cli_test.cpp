// `braid plot` as a user meets it: a run trained by the real binary drawn as SVG (its eval
// accuracy curve there, with a point per evaluation) and PNG; a missing run, a corrupt
// metrics file and an unknown format refused with the file named and a non-zero exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"
#include "tiny_mlp.h"

namespace {

using braid::testing::BraidResult;
using braid::testing::run_braid;
using braid::testing::TempDir;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  text:  " << text << "\n  lacks: " << part;
}

// The points of the polyline titled `name`.
size_t polyline_points(const std::string& svg, const std::string& name) {
  const size_t title = svg.find("<title>" + name + "</title></polyline>");
  if (title == std::string::npos) return 0;
  const size_t start = svg.rfind("points=\"", title) + 8;
  const std::string points = svg.substr(start, svg.find('"', start) - start);
  return static_cast<size_t>(std::count(points.begin(), points.end(), ','));
}

TEST(PlotCli, DrawsATrainedRunAsSvgAndPng) {
  REQUIRE_FASHION_MNIST();
  TempDir tmp;
  const std::string run = tmp.file("run");
  BraidResult r = run_braid("train " + braid::testing::tiny_mlp_flags(tmp) +
                            "--optimizer adam --lr 0.003 --steps 120 --eval-every 40 --out " + run);
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<double> eval_steps;  // the run's own evaluations
  std::ifstream metrics(run + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json rec = nlohmann::json::parse(line);
    if (rec["event"] == "eval" && rec.contains("accuracy"))
      eval_steps.insert(rec["step"].get<double>());
  }
  ASSERT_GE(eval_steps.size(), 3u);

  r = run_braid("plot " + run);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, run + "/curves.svg\n");
  const std::string svg = read(run + "/curves.svg");
  EXPECT_TRUE(contains(svg, ">eval accuracy</text>"));  // the legend
  EXPECT_TRUE(contains(svg, ">run</text>"));            // the title: the run's name
  EXPECT_EQ(polyline_points(svg, "eval accuracy"), eval_steps.size());
  EXPECT_GT(polyline_points(svg, "train loss"), 0u);

  r = run_braid("plot " + run + "/ -o " + tmp.file("curves.png") + " --width 800 --height 600");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, tmp.file("curves.png") + "\n");
  const std::string png = read(tmp.file("curves.png"));
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_EQ(png.substr(16, 8), std::string("\0\0\x03\x20\0\0\x02\x58", 8));  // 800 x 600
}

TEST(PlotCli, AMissingRunExitsNonZeroNamingIt) {
  TempDir tmp;
  BraidResult r = run_braid("plot " + tmp.file("no_such_run"));
  EXPECT_EQ(r.code, 2) << r.output;  // an I/O error
  EXPECT_TRUE(contains(r.output, "braid: I/O error: "));
  EXPECT_TRUE(contains(r.output, tmp.file("no_such_run")));

  r = run_braid("plot " + tmp.path());  // a directory, but no run in it
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, tmp.file("metrics.jsonl")));
  EXPECT_FALSE(std::ifstream(tmp.file("curves.svg")).good());
}

TEST(PlotCli, ACorruptMetricsFileExitsNonZeroNamingTheFileAndLine) {
  TempDir tmp;
  std::ofstream(tmp.file("metrics.jsonl")) << "{\"event\":\"train\",\"loss\":2.0,\"step\":10}\n"
                                           << "{\"event\":\"train\",\"loss\":1.\x01\x02garbage\n"
                                           << "{\"event\":\"train\",\"loss\":1.0,\"step\":30}\n";
  const BraidResult r = run_braid("plot " + tmp.path());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "braid: error: " + tmp.file("metrics.jsonl") + ":2: "));
  EXPECT_FALSE(std::ifstream(tmp.file("curves.svg")).good());
}

TEST(PlotCli, AnOutputOfAnotherFormatIsRefused) {
  TempDir tmp;
  std::ofstream(tmp.file("metrics.jsonl")) << "{\"event\":\"train\",\"loss\":2.0,\"step\":10}\n";
  const BraidResult r = run_braid("plot " + tmp.path() + " -o " + tmp.file("c.jpg"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, tmp.file("c.jpg")));
  EXPECT_TRUE(contains(r.output, ".svg or a .png"));
  EXPECT_FALSE(std::ifstream(tmp.file("c.jpg")).good());
}

}  // namespace
