// The server's update of federated averaging (server_optimizer.h) on a few numbers, against
// values worked out by hand from the papers' formulas; its state saved and restored; and
// its errors naming the fedavg.* keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "expect_error.h"
#include "parallel/server_optimizer.h"

namespace braid::parallel {
namespace {

// Two rounds over three floats. Round 1: delta sum {2, -4, 0} over 4 samples, so
// delta = {0.5, -1, 0}; round 2: {-1, 3, 6} over 3 samples, delta = {-1/3, 1, 2}.
const std::vector<float> kStart{1.0f, -2.0f, 0.5f};
const std::vector<float> kSum1{2.0f, -4.0f, 0.0f}, kSum2{-1.0f, 3.0f, 6.0f};
constexpr double kWeight1 = 4, kWeight2 = 3;
// The values are exact in double to ~1e-16; float arithmetic on numbers below 3 rounds each
// of a handful of operations by at most 2.4e-7 / 2.
constexpr float kTol = 1e-6f;

struct Rounds {
  std::vector<float> after1, after2;
};

Rounds two_rounds(const ServerOptimizerOptions& o) {
  ServerOptimizer opt(o, 3);
  Rounds out;
  std::vector<float> w = kStart;
  opt.step(w, kSum1, kWeight1);
  out.after1 = w;
  opt.step(w, kSum2, kWeight2);
  out.after2 = w;
  EXPECT_EQ(opt.rounds(), 2);
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], kTol) << what << " " << i;
}

// avg: w += lr delta. lr 0.5: w1 = w + 0.5 {0.5, -1, 0}, w2 = w1 + 0.5 {-1/3, 1, 2}.
TEST(FedAvgServer, AvgAppliesTheMeanDeltaScaledByTheServerRate) {
  const Rounds r = two_rounds({.kind = ServerOptimizerKind::avg, .lr = 0.5f});
  expect_near(r.after1, {1.25, -2.5, 0.5}, "round 1");
  expect_near(r.after2, {1.0 + 1.0 / 12.0, -2.0, 1.5}, "round 2");
}

// avgm (Hsu et al. 2019): m = beta m + delta, w += lr m. beta 0.9, lr 1:
// m1 = {0.5, -1, 0}, w1 = {1.5, -3, 0.5};
// m2 = 0.9 m1 + {-1/3, 1, 2} = {0.45 - 1/3, 0.1, 2}, w2 = w1 + m2.
TEST(FedAvgServer, AvgmKeepsMomentumAcrossRounds) {
  const Rounds r = two_rounds({.kind = ServerOptimizerKind::avgm, .lr = 1.0f, .momentum = 0.9f});
  expect_near(r.after1, {1.5, -3.0, 0.5}, "round 1");
  expect_near(r.after2, {1.5 + 0.45 - 1.0 / 3.0, -2.9, 2.5}, "round 2");
}

// adam (Reddi et al. 2021, no bias correction): b1 0.9, b2 0.99, tau 1e-3, lr 0.1.
// Round 1: m1 = 0.1 delta = {0.05, -0.1, 0}, v1 = 0.01 delta^2 = {0.0025, 0.01, 0},
// w1 = w + 0.1 m1 / (sqrt(v1) + tau) = {1 + 0.005 / 0.051, -2 - 0.01 / 0.101, 0.5}.
// Round 2: m2 = 0.9 m1 + 0.1 {-1/3, 1, 2} = {0.045 - 1/30, 0.01, 0.2},
// v2 = 0.99 v1 + 0.01 {1/9, 1, 4} = {0.002475 + 1/900, 0.0199, 0.04}.
TEST(FedAvgServer, AdamIsFedAdamWithoutBiasCorrection) {
  const ServerOptimizerOptions o{.kind = ServerOptimizerKind::adam,
                                 .lr = 0.1f,
                                 .momentum = 0.9f,
                                 .beta2 = 0.99f,
                                 .eps = 1e-3f};
  const Rounds r = two_rounds(o);
  const std::vector<double> w1{1.0 + 0.005 / 0.051, -2.0 - 0.01 / 0.101, 0.5};
  expect_near(r.after1, w1, "round 1");
  const double m2[3] = {0.045 - 1.0 / 30.0, 0.01, 0.2};
  const double v2[3] = {0.002475 + 1.0 / 900.0, 0.0199, 0.04};
  std::vector<double> w2(3);
  for (int i = 0; i < 3; ++i) w2[i] = w1[i] + 0.1 * m2[i] / (std::sqrt(v2[i]) + 1e-3);
  expect_near(r.after2, w2, "round 2");
  // Against the worked numbers: 1.11720129, -2.09197099, 0.59950249.
  EXPECT_NEAR(r.after2[0], 1.11720129, kTol);
}

// A state saved after round 1 and loaded into a fresh optimizer continues bit for bit.
TEST(FedAvgServer, StateSavedAndLoadedContinuesTheSameRounds) {
  for (const auto kind :
       {ServerOptimizerKind::avg, ServerOptimizerKind::avgm, ServerOptimizerKind::adam}) {
    const ServerOptimizerOptions o{.kind = kind, .lr = 0.3f};
    ServerOptimizer a(o, 3);
    std::vector<float> w = kStart;
    a.step(w, kSum1, kWeight1);
    const std::vector<float> saved(a.state().begin(), a.state().end());
    EXPECT_EQ(static_cast<int64_t>(saved.size()), kind == ServerOptimizerKind::avg    ? 0
                                                  : kind == ServerOptimizerKind::avgm ? 3
                                                                                      : 6);
    std::vector<float> w_b = w;
    a.step(w, kSum2, kWeight2);
    ServerOptimizer b(o, 3);
    b.load_state(saved);
    b.step(w_b, kSum2, kWeight2);
    EXPECT_EQ(w_b, w) << server_optimizer_name(kind);
    EXPECT_TRUE(std::equal(a.state().begin(), a.state().end(), b.state().begin()));
  }
}

TEST(FedAvgServer, BadSettingsAreRefusedNamingTheKey) {
  EXPECT_EQ(parse_server_optimizer("avgm"), ServerOptimizerKind::avgm);
  expect_error_naming([] { parse_server_optimizer("sgd"); }, "fedavg.server_optimizer");
  using K = ServerOptimizerKind;
  expect_error_naming([] { validate({.kind = K::avg, .lr = 0}); }, "fedavg.server_lr");
  expect_error_naming([] { validate({.kind = K::avgm, .momentum = 1}); }, "fedavg.server_momentum");
  expect_error_naming([] { validate({.kind = K::adam, .beta2 = 1.5f}); }, "fedavg.server_beta2");
  expect_error_naming([] { validate({.kind = K::adam, .eps = 0}); }, "fedavg.server_eps");
  validate({.kind = K::avg, .momentum = 5});  // avg reads no momentum

  ServerOptimizer adam({.kind = K::adam}, 3);
  const std::vector<float> wrong(4);
  expect_error_naming([&] { adam.load_state(wrong); }, "fedavg.server_optimizer");
  std::vector<float> w = kStart;
  EXPECT_THROW(adam.step(w, kSum1, 0.0), Error);
  const std::vector<float> short_sum(2);
  EXPECT_THROW(adam.step(w, short_sum, 1.0), Error);
  EXPECT_EQ(w, kStart) << "a refused step changed the parameters";
}

}  // namespace
}  // namespace braid::parallel
