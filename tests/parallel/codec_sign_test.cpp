// The sign codec against a scaled-sign exchange computed here: one step matches it (and its
// error-feedback norm) on every rank alike, error feedback keeps the sum over steps from
// drifting (and its absence does not), and the wire carries a bit per float plus a scale.
#include "parallel/codec_sign.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "parallel/codec_ranks.h"

namespace braid::parallel {
namespace {

using testing::CodecRun;
using testing::noise;
using testing::random_gradient;
using testing::run_codec;

CodecConfig sign_config() {
  CodecConfig c;
  c.name = "sign";
  return c;
}

constexpr int64_t kBlock = 32;  // CodecConfig::sign_chunk's default

double scaled_sign_block(float* x, int64_t n);

// x := s sign(x) per block of kBlock floats, s = the block's mean |x| (zero counts as
// positive); returns what was lost, squared.
double scaled_sign(float* x, int64_t n) {
  double lost = 0;
  for (int64_t lo = 0; lo < n; lo += kBlock)
    lost += scaled_sign_block(x + lo, std::min(kBlock, n - lo));
  return lost;
}

double scaled_sign_block(float* x, int64_t n) {
  if (n == 0) return 0;
  double l1 = 0;
  for (int64_t i = 0; i < n; ++i) l1 += std::fabs(double{x[i]});
  const auto s = static_cast<float>(l1 / static_cast<double>(n));
  double lost = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] < 0 ? -s : s;
    lost += (double{x[i]} - d) * (double{x[i]} - d);
    x[i] = d;
  }
  return lost;
}

struct SignExchange {
  std::vector<float> result;
  std::vector<double> lost;  // [rank]: worker and server losses, squared, as error_norm^2
};

// One step from empty memories: every rank's chunks to scaled signs, chunk j summed over ranks
// in rank order in fp32 (on rank j), the sum to a scaled sign again.
SignExchange sign_exchange(const testing::GradientFn& gradient, int64_t count, int n) {
  const int64_t chunk = (count + n - 1) / n;
  SignExchange out{std::vector<float>(static_cast<size_t>(count), 0.0f),
                   std::vector<double>(static_cast<size_t>(n), 0.0)};
  std::vector<std::vector<float>> decoded(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& d = decoded[static_cast<size_t>(r)];
    for (int64_t i = 0; i < count; ++i) d.push_back(gradient(r, 0, i));
    for (int64_t begin = 0; begin < count; begin += chunk)
      out.lost[static_cast<size_t>(r)] +=
          scaled_sign(d.data() + begin, std::min(chunk, count - begin));
  }
  for (int j = 0; j < n; ++j) {
    const int64_t begin = std::min(count, j * chunk), len = std::min(chunk, count - begin);
    for (int r = 0; r < n; ++r)
      for (int64_t i = begin; i < begin + len; ++i)
        out.result[static_cast<size_t>(i)] +=
            decoded[static_cast<size_t>(r)][static_cast<size_t>(i)];
    out.lost[static_cast<size_t>(j)] += scaled_sign(out.result.data() + begin, len);
  }
  return out;
}

TEST(SignCodec, OneStepIsTheScaledSignExchangeOnEveryRankAlike) {
  for (const int n : {2, 3, 4})
    for (const int64_t count : {1, 7, 1000, 4099}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + ", count " + std::to_string(count));
      const CodecRun run = run_codec(testing::maker(sign_config()), n, {count}, 1, random_gradient);
      testing::expect_same_bits(run);
      const SignExchange want = sign_exchange(random_gradient, count, n);
      for (int64_t i = 0; i < count; ++i) {
        const float w = want.result[static_cast<size_t>(i)];
        // A scale computed in another order may differ in its last bits; a sign may not.
        ASSERT_NEAR(run.last[0][static_cast<size_t>(i)], w, 1e-6 * std::fabs(w)) << "float " << i;
      }
      for (int r = 0; r < n; ++r) {
        const double norm = std::sqrt(want.lost[static_cast<size_t>(r)]);
        EXPECT_NEAR(run.report[static_cast<size_t>(r)].error_norm, norm, 1e-5 * norm + 1e-6)
            << "rank " << r;
      }
    }
}

// Every float of a chunk with the same magnitude: the scale is that magnitude and nothing is
// lost on a worker; with two ranks of opposite halves, the sums are 0 or +-2 c.
TEST(SignCodec, EqualMagnitudesPassTheWorkerStageExactly) {
  const auto gradient = [](int rank, int64_t, int64_t i) {
    return ((i + rank) % 3 == 0 ? -0.5f : 0.5f);
  };
  const CodecRun run = run_codec(testing::maker(sign_config()), 2, {1000}, 1, gradient);
  const SignExchange want = sign_exchange(gradient, 1000, 2);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(run.last[0][i], want.result[i]) << "float " << i;
}

// Gradients with a fixed part far larger than their noise: a scaled sign makes nearly the same
// error every step, so without error feedback the error of the sum over steps grows linearly;
// with it, the error is what the memories hold at the end, which does not grow.
float biased_gradient(int rank, int64_t step, int64_t i) {
  return noise(static_cast<uint64_t>(rank), 7, static_cast<uint64_t>(i)) +
         1e-3f * noise(static_cast<uint64_t>(rank), static_cast<uint64_t>(step) + 100,
                       static_cast<uint64_t>(i));
}

TEST(SignCodec, ErrorFeedbackKeepsTheSumOverStepsFromDrifting) {
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 1000;
  const auto error_after = [&](int64_t steps, bool feedback) {
    const CodecRun run = run_codec(testing::maker(sign_config()), kRanks, {kCount}, steps,
                                   biased_gradient, !feedback);
    return testing::distance(run.total[0], run.true_total);
  };
  // One step's error, 2 sqrt(count) N for gradients within 1 (each stage's loss is at most
  // the norm of its input). The memories settle within a few of those (a sigma-delta loop:
  // a float's memory stays within about the scale; measured: 134 at 50 steps, 216 at 200,
  // 413 at 1600, settling), while without feedback the error grows by the step (4184 at 200).
  const double one_step = 2 * std::sqrt(double{kCount}) * kRanks;
  const double with_50 = error_after(50, true), with_200 = error_after(200, true);
  EXPECT_LE(with_50, 3 * one_step);
  EXPECT_LE(with_200, 3 * one_step);
  EXPECT_LT(with_200, 2 * with_50) << "grows with the steps";
  const double without_50 = error_after(50, false), without_200 = error_after(200, false);
  EXPECT_GT(without_200, 3 * without_50) << "the test's gradients do not show error feedback";
  EXPECT_GT(without_200, 5 * with_200);
}

// The bytes of every slot sent: 2 (N - 1) (4 ceil(C / 32) + 4 ceil(C / 32)), C = ceil(count / N).
TEST(SignCodec, SendsABitPerFloatPlusAScale) {
  for (const int n : {2, 3, 4})
    for (const int64_t count : {1, 7, 1000, 4099}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + ", count " + std::to_string(count));
      const CodecRun run = run_codec(testing::maker(sign_config()), n, {count}, 1, random_gradient);
      const int64_t chunk = (count + n - 1) / n;
      const double slot = 4.0 * static_cast<double>((chunk + kBlock - 1) / kBlock) +
                          4.0 * static_cast<double>((chunk + 31) / 32);
      for (const CodecReport& report : run.report) {
        EXPECT_EQ(report.wire_bytes, 2.0 * (n - 1) * slot);
        EXPECT_EQ(report.dense_bytes, dense_allreduce_bytes(count, n));
      }
      if (count == 4099) {
        EXPECT_GT(run.report[0].ratio(), 15) << "not about 1/16 of fp32";
      }
    }
}

TEST(SignCodec, AnInfinityReachesTheResultAndLeavesNoMemoryBehind) {
  const auto gradient = [](int rank, int64_t step, int64_t i) {
    if (step == 0 && rank == 0 && i == 5) return -std::numeric_limits<float>::infinity();
    return random_gradient(rank, step, i);
  };
  const CodecRun run = run_codec(testing::maker(sign_config()), 3, {100}, 2, gradient);
  EXPECT_FALSE(std::isfinite(run.total[0][5])) << "step 0 hid the overflow";
  for (const float x : run.last[0]) EXPECT_TRUE(std::isfinite(x)) << "step 1 inherited it";
}

TEST(SignCodec, ComesFromTheRegistry) {
  EXPECT_EQ(make_codec(sign_config())->name(), "sign");
  EXPECT_NE(std::find(codec_names().begin(), codec_names().end(), "sign"), codec_names().end());
}

}  // namespace
}  // namespace braid::parallel
