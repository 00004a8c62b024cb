// The loss scaler against DeepSpeed's DynamicLossScaler, step by step by hand: growth after
// `window` clean steps, an overflow spending the hysteresis before the scale halves, the
// floor, every overflow skipped and counted; overflow detection; the checkpoint state.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace braid::optim {
namespace {

TEST(LossScaler, GrowsAfterTheWindowAndHalvesOnceTheHysteresisIsSpent) {
  LossScaler s({.initial_scale = 1024, .factor = 2, .window = 3, .hysteresis = 2, .min_scale = 1});
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.update(false));  // iteration 0: 1 clean step since "overflow -1"
  EXPECT_FALSE(s.update(false));  // 1
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.update(false));  // 2: three clean steps -> grows
  EXPECT_EQ(s.scale(), 2048);
  EXPECT_TRUE(s.update(true));  // 3: first overflow spends the hysteresis (2 -> 1)
  EXPECT_EQ(s.scale(), 2048);
  EXPECT_TRUE(s.update(true));  // 4: hysteresis spent -> halves
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.update(true));  // 5: still spent (only growth resets it) -> halves again
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped(), 3);
  EXPECT_FALSE(s.update(false));  // 6, 7: clean
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_FALSE(s.update(false));  // 8: three clean steps since the overflow at 5 -> grows
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.update(true));  // 9: the growth reset the hysteresis: no halving
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.steps(), 10);
  EXPECT_EQ(s.skipped(), 4);
}

TEST(LossScaler, DeepSpeedDefaultsGrowAfterAThousandCleanSteps) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536);
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072);
}

TEST(LossScaler, NeverBelowTheFloor) {
  LossScaler s({.initial_scale = 4, .factor = 2, .window = 100, .hysteresis = 1, .min_scale = 1});
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 1);
}

TEST(LossScaler, OverflowIsAnyInfOrNaN) {
  std::vector<float> g(1000, 1e30f);
  EXPECT_FALSE(LossScaler::has_overflow(g));
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    g[617] = bad;
    EXPECT_TRUE(LossScaler::has_overflow(g)) << bad;
  }
  EXPECT_FALSE(LossScaler::has_overflow({}));
}

TEST(LossScaler, StateRoundTripsAndABadStateNamesTheKey) {
  // The configuration is the run's (its settings); the state is where the run got to.
  const LossScalerConfig config{
      .initial_scale = 256, .factor = 2, .window = 2, .hysteresis = 2, .min_scale = 1};
  LossScaler a(config);
  a.update(true);
  a.update(false);
  LossScaler b(config);
  b.load(a.state(), "state.json");
  EXPECT_EQ(b.state(), a.state());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.update(i == 2), b.update(i == 2));
  EXPECT_EQ(b.scale(), a.scale());
  nlohmann::json bad = a.state();
  bad.erase("hysteresis_left");
  try {
    b.load(bad, "ckpt/state.json");
    FAIL() << "a state without hysteresis_left loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/state.json: loss_scaler.hysteresis_left"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace braid::optim
