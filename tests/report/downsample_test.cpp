// Thinning a curve to its pixel columns: each column's lowest and highest point in their
// order, the curve's ends, and nothing more.
#include "report/downsample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace braid::report {
namespace {

std::vector<double> ys(const std::vector<Point>& points) {
  std::vector<double> out;
  for (const Point& p : points) out.push_back(p.y);
  return out;
}

TEST(Downsample, KeepsACurveWithAtMostTwoPointsAColumn) {
  const std::vector<Point> in = {{0.5, 3}, {1.2, 1}, {1.7, 2}, {2.5, 9}};
  EXPECT_EQ(ys(downsample(in)), ys(in));
  EXPECT_TRUE(downsample({}).empty());
  EXPECT_EQ(ys(downsample({{4.5, 7}})), std::vector<double>{7});
}

TEST(Downsample, KeepsAColumnsLowestAndHighestInTheirOrder) {
  // column 1 holds five points; the curve's ends are in columns 0 and 2
  const std::vector<Point> in = {{0.5, 4}, {1.1, 5}, {1.3, 1}, {1.5, 9},
                                 {1.7, 3}, {1.9, 7}, {2.5, 6}};
  EXPECT_EQ(ys(downsample(in)), (std::vector<double>{4, 1, 9, 6}));
  // the highest first
  const std::vector<Point> falling = {{0.5, 4}, {1.1, 5}, {1.3, 9}, {1.5, 1}, {1.7, 3}, {2.5, 6}};
  EXPECT_EQ(ys(downsample(falling)), (std::vector<double>{4, 9, 1, 6}));
  // a flat column: one point
  const std::vector<Point> flat = {{0.5, 4}, {1.1, 2}, {1.3, 2}, {1.5, 2}, {2.5, 6}};
  EXPECT_EQ(ys(downsample(flat)), (std::vector<double>{4, 2, 6}));
}

TEST(Downsample, KeepsTheCurvesFirstAndLastPoint) {
  // one column: first 5, lowest 1, highest 9, last 7
  const std::vector<Point> in = {{10.1, 5}, {10.2, 1}, {10.3, 9}, {10.4, 3}, {10.9, 7}};
  EXPECT_EQ(ys(downsample(in)), (std::vector<double>{5, 1, 9, 7}));
  const std::vector<Point> two = {{3.2, 8}, {3.4, 8}};
  EXPECT_EQ(ys(downsample(two)), (std::vector<double>{8, 8}));
}

// 100,000 points over 500 columns: at most two a column (three in the end columns, with the
// curve's ends), every column's extremes and both ends kept, in order.
TEST(Downsample, BoundsALongCurveToItsColumns) {
  constexpr int kPoints = 100000, kColumns = 500;
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0, 20);
  std::vector<Point> in;
  for (int i = 0; i < kPoints; ++i) {
    const double x = 50 + static_cast<double>(i) * kColumns / kPoints;
    in.push_back({x, 300 + 200 * std::exp(-i / 20000.0) + noise(rng)});
  }
  const std::vector<Point> out = downsample(in);
  ASSERT_LE(out.size(), 2u * kColumns + 2);
  std::map<int, int> per_column;
  for (const Point& p : out) ++per_column[static_cast<int>(std::floor(p.x))];
  for (const auto& [column, count] : per_column)
    EXPECT_LE(count, column == 50 || column == 50 + kColumns - 1 ? 3 : 2) << column;
  EXPECT_EQ(per_column.size(), static_cast<size_t>(kColumns));
  EXPECT_EQ(out.front().y, in.front().y);
  EXPECT_EQ(out.back().y, in.back().y);
  // each column's extremes are there, and the output is the input's points in order
  std::map<int, std::pair<double, double>> extremes;
  for (const Point& p : in) {
    auto [it, fresh] = extremes.try_emplace(static_cast<int>(std::floor(p.x)), p.y, p.y);
    it->second.first = std::min(it->second.first, p.y);
    it->second.second = std::max(it->second.second, p.y);
  }
  std::map<int, std::pair<double, double>> kept;
  size_t at = 0;
  for (const Point& p : out) {
    while (at < in.size() && (in[at].x != p.x || in[at].y != p.y)) ++at;
    ASSERT_LT(at, in.size()) << "a point out of order or not in the input";
    auto [it, fresh] = kept.try_emplace(static_cast<int>(std::floor(p.x)), p.y, p.y);
    it->second.first = std::min(it->second.first, p.y);
    it->second.second = std::max(it->second.second, p.y);
  }
  EXPECT_EQ(kept, extremes);
}

}  // namespace
}  // namespace braid::report
