// Nice axes against hand-computed ticks, a sweep of ranges against the axis' promises, tick
// labels, and the data-to-pixel mapping.
#include "report/axis.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"

namespace braid::report {
namespace {

void expect_ticks(const Axis& a, double step, const std::vector<double>& ticks) {
  EXPECT_DOUBLE_EQ(a.step, step);
  ASSERT_EQ(a.ticks.size(), ticks.size());
  for (size_t i = 0; i < ticks.size(); ++i) EXPECT_NEAR(a.ticks[i], ticks[i], 1e-12) << i;
  EXPECT_DOUBLE_EQ(a.lo, a.ticks.front());
  EXPECT_DOUBLE_EQ(a.hi, a.ticks.back());
}

TEST(Axis, TicksOfHandComputedRanges) {
  // 1/6 rounds up to 0.2
  expect_ticks(nice_axis(0, 1, 6), 0.2, {0, 0.2, 0.4, 0.6, 0.8, 1});
  // a loss curve: 2.06 / 6 = 0.34 rounds up to 0.5, the ends out to whole steps
  expect_ticks(nice_axis(0.2537, 2.31, 6), 0.5, {0, 0.5, 1, 1.5, 2, 2.5});
  // steps: 233 / 6 = 38.8 rounds up to 50
  expect_ticks(nice_axis(1, 234, 6), 50, {0, 50, 100, 150, 200, 250});
  // across zero: 15.9 / 5 = 3.18 rounds up to 5
  expect_ticks(nice_axis(-3.7, 12.2, 5), 5, {-5, 0, 5, 10, 15});
  // 1.2 / 2 = 0.6 rounds up to 1, but whole steps around [0.9, 2.1] are three: so 2
  expect_ticks(nice_axis(0.9, 2.1, 2), 2, {0, 2, 4});
  // a learning rate: 3e-4 / 6 = 5e-5
  expect_ticks(nice_axis(0, 3e-4, 6), 5e-5, {0, 5e-5, 1e-4, 1.5e-4, 2e-4, 2.5e-4, 3e-4});
  // ends already on ticks stay
  expect_ticks(nice_axis(100, 400, 3), 100, {100, 200, 300, 400});
  // ... even where the division misses: 0.6 / 0.2 is 2.9999999999999996, 1.4 / 0.2 is
  // 6.999999999999999 and 0.14 / 0.02 is 7.000000000000001
  expect_ticks(nice_axis(0.6, 1.4, 4), 0.2, {0.6, 0.8, 1.0, 1.2, 1.4});
  expect_ticks(nice_axis(0.04, 0.14, 5), 0.02, {0.04, 0.06, 0.08, 0.1, 0.12, 0.14});
}

TEST(Axis, OneValueIsWidenedAroundIt) {
  // 0.003 +- 0.0015; 0.003 / 6 = 5e-4
  expect_ticks(nice_axis(0.003, 0.003, 6), 5e-4,
               {0.0015, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.0045});
  expect_ticks(nice_axis(0, 0, 4), 0.5, {-1, -0.5, 0, 0.5, 1});  // zero: [-1, 1]
  expect_ticks(nice_axis(-8, -8, 4), 2, {-12, -10, -8, -6, -4});
}

// Every range keeps the promises: the data inside, at most max_ticks intervals, a step of
// 1, 2 or 5 times a power of ten, and no smaller such step would have done.
TEST(Axis, EveryRangeKeepsThePromises) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-9, 9), unit(-1, 1);
  for (int i = 0; i < 20000; ++i) {
    const double scale = std::pow(10.0, exponent(rng));
    double lo = unit(rng) * scale, hi = unit(rng) * scale;
    if (lo > hi) std::swap(lo, hi);
    const int max_ticks = 2 + i % 9;
    const Axis a = nice_axis(lo, hi, max_ticks);
    ASSERT_LE(a.lo, lo) << lo << " " << hi;
    ASSERT_GE(a.hi, hi) << lo << " " << hi;
    ASSERT_LE(a.ticks.size(), static_cast<size_t>(max_ticks) + 1) << lo << " " << hi;
    ASSERT_GE(a.ticks.size(), 2u);
    const double mantissa = a.step / std::pow(10.0, std::floor(std::log10(a.step) + 1e-9));
    ASSERT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 ||
                std::abs(mantissa - 5) < 1e-9)
        << a.step;
    for (size_t k = 1; k < a.ticks.size(); ++k)
      ASSERT_NEAR(a.ticks[k] - a.ticks[k - 1], a.step, a.step * 1e-6);
    // the next smaller nice step (1 -> 0.5, 2 -> 1, 5 -> 2) would not have done
    const double smaller = a.step / (std::abs(mantissa - 5) < 1e-9 ? 2.5 : 2);
    const double intervals = std::ceil(hi / smaller - 1e-9) - std::floor(lo / smaller + 1e-9);
    ASSERT_TRUE(intervals > max_ticks || smaller < (hi - lo) / max_ticks * (1 - 1e-9))
        << lo << " " << hi << " step " << a.step;
  }
}

TEST(Axis, RefusesABrokenRange) {
  EXPECT_THROW(nice_axis(2, 1), Error);
  EXPECT_THROW(nice_axis(0, std::nan("")), Error);
  EXPECT_THROW(nice_axis(0, 1, 0), Error);
}

TEST(Axis, LabelsHaveTheDecimalsOfTheStep) {
  const Axis unit = nice_axis(0, 1, 6);
  EXPECT_EQ(unit.label(unit.ticks[3]), "0.6");  // 3 * 0.2 is 0.6000000000000001
  EXPECT_EQ(unit.label(0), "0");
  EXPECT_EQ(unit.label(-1e-17), "0");  // not "-0.0"
  const Axis steps = nice_axis(0, 100000, 5);
  EXPECT_EQ(steps.label(40000), "40000");
  const Axis lr = nice_axis(0, 3e-4, 6);
  EXPECT_EQ(lr.label(lr.ticks[1]), "0.00005");
  EXPECT_EQ(lr.label(lr.ticks[5]), "0.00025");
  const Axis tiny = nice_axis(0, 3e-8, 6);  // past six decimals: one exponent
  EXPECT_EQ(tiny.label(tiny.ticks[5]), "2.5e-8");
  EXPECT_EQ(tiny.label(tiny.ticks[1]), "0.5e-8");
  const Axis big = nice_axis(0, 2e7, 4);
  EXPECT_EQ(big.label(1.5e7), "1.5e7");
  EXPECT_EQ(big.label(2e7), "2.0e7");
  const Axis negative = nice_axis(-3.7, 12.2, 5);
  EXPECT_EQ(negative.label(-5), "-5");
}

TEST(Axis, MapsTheEndsToTheAreasCorners) {
  Mapping m;
  m.x = nice_axis(0, 100, 5);  // [0, 100]
  m.y = nice_axis(0, 1, 5);    // [0, 1]
  m.area = {10, 20, 200, 100};
  EXPECT_DOUBLE_EQ(m.px(0), 10);
  EXPECT_DOUBLE_EQ(m.px(100), 210);
  EXPECT_DOUBLE_EQ(m.px(25), 60);
  EXPECT_DOUBLE_EQ(m.py(0), 120);  // the bottom
  EXPECT_DOUBLE_EQ(m.py(1), 20);   // the top
  EXPECT_DOUBLE_EQ(m.py(0.25), 95);
}

}  // namespace
}  // namespace braid::report
