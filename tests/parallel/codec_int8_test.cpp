// The int8 codec against dense fp32 sums computed here: the one-step bound of codec_int8.h,
// error feedback that keeps the sum over steps within a bound independent of the number of
// steps (and its absence, which does not), exact values passing bitwise, the same bits on every
// rank, the bytes on the wire, and stochastic rounding that is unbiased and reproducible.
#include "parallel/codec_int8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "comm/collectives.h"
#include "parallel/codec_ranks.h"

namespace braid::parallel {
namespace {

using testing::CodecRun;
using testing::mix;
using testing::noise;
using testing::random_gradient;
using testing::run_codec;

CodecConfig int8_config(int64_t group, bool stochastic = false, uint64_t seed = 0) {
  CodecConfig c;
  c.name = "int8";
  c.int8_chunk = group;
  c.stochastic_rounding = stochastic;
  c.seed = seed;
  return c;
}

// The group of float i in the codec's layout: chunks of ceil(count / N), groups of G from each
// chunk's start. Returns [begin, end).
std::pair<int64_t, int64_t> group_of(int64_t i, int64_t count, int n, int64_t group) {
  const int64_t chunk = (count + n - 1) / n;
  const int64_t chunk_begin = i / chunk * chunk, chunk_end = std::min(count, chunk_begin + chunk);
  const int64_t begin = chunk_begin + (i - chunk_begin) / group * group;
  return {begin, std::min(chunk_end, begin + group)};
}

// The one-step bound of codec_int8.h for every float (nearest: sum_r s_r / 2 + s' / 2;
// stochastic: sum_r s_r + s'), with s' bounded by the largest true sum of the group plus what
// the first stage may have added to it, and room for fp32 rounding.
std::vector<double> one_step_bound(const testing::GradientFn& gradient, int64_t count, int n,
                                   int64_t group, bool stochastic) {
  std::vector<double> bound(static_cast<size_t>(count));
  const double first_stage = stochastic ? 1.0 : 0.5;
  for (int64_t begin = 0; begin < count;) {
    const auto [lo, hi] = group_of(begin, count, n, group);
    double scales = 0, largest_sum = 0;
    for (int r = 0; r < n; ++r) {
      double peak = 0;
      for (int64_t i = lo; i < hi; ++i) peak = std::max(peak, std::fabs(double{gradient(r, 0, i)}));
      scales += peak / 127;
    }
    for (int64_t i = lo; i < hi; ++i) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += gradient(r, 0, i);
      largest_sum = std::max(largest_sum, std::fabs(sum));
    }
    const double sum_scale = (largest_sum + first_stage * scales) / 127;
    for (int64_t i = lo; i < hi; ++i)
      bound[static_cast<size_t>(i)] =
          first_stage * (scales + sum_scale) + 1e-5 * 127 * (scales + sum_scale);
    begin = hi;
  }
  return bound;
}

TEST(Int8Codec, OneStepStaysWithinTheBoundOnEveryRankAlike) {
  for (const bool stochastic : {false, true})
    for (const int64_t group : {int64_t{7}, int64_t{256}})
      for (const int n : {2, 3, 4})
        for (const int64_t count : {1, 7, 1000, 4099}) {
          SCOPED_TRACE((stochastic ? "stochastic" : "nearest") + std::string(", group ") +
                       std::to_string(group) + ", ranks " + std::to_string(n) + ", count " +
                       std::to_string(count));
          const CodecRun run = run_codec(testing::maker(int8_config(group, stochastic, 5)), n,
                                         {count}, 1, random_gradient);
          testing::expect_same_bits(run);
          const std::vector<double> bound =
              one_step_bound(random_gradient, count, n, group, stochastic);
          for (int64_t i = 0; i < count; ++i) {
            const auto k = static_cast<size_t>(i);
            ASSERT_LE(std::fabs(run.last[0][k] - run.true_last[k]), bound[k]) << "float " << i;
          }
        }
}

// Small integers, 127 the largest of every group on every rank and of every group of the sums:
// every scale is 1, every stage exact, so the codec is the fp32 allreduce, bit for bit.
float exact_value(int rank, int64_t i, int64_t count, int n, int64_t group) {
  const auto [lo, hi] = group_of(i, count, n, group);
  if (hi - lo < n) return 0;  // too short to hold each rank's 127: all zero, also exact
  const int64_t p = i - lo;
  if (p < n) return p == rank ? 127.0f : 0.0f;  // the sum is 127 there
  const int64_t reach = 127 / n;                // so the sums stay within 127
  const auto h = static_cast<int64_t>(mix(static_cast<uint64_t>(rank * 1'000'003 + i)) %
                                      static_cast<uint64_t>(2 * reach + 1));
  return static_cast<float>(h - reach);
}

TEST(Int8Codec, ExactValuesGiveThePlainFp32AllreduceBitwise) {
  constexpr int64_t kGroup = 16;
  for (const bool stochastic : {false, true})
    for (const int n : {2, 3, 4})
      for (const int64_t count : {7, 1000, 4099}) {
        SCOPED_TRACE((stochastic ? "stochastic" : "nearest") + std::string(", ranks ") +
                     std::to_string(n) + ", count " + std::to_string(count));
        const auto value = [&](int r, int64_t, int64_t i) {
          return exact_value(r, i, count, n, kGroup);
        };
        const CodecRun run =
            run_codec(testing::maker(int8_config(kGroup, stochastic, 9)), n, {count}, 1, value);
        std::vector<float> dense(static_cast<size_t>(count));
        std::mutex mu;
        comm::testing::rethrow_first(comm::testing::run_group(n, [&](comm::Group& g) {
          std::vector<float> x(static_cast<size_t>(count));
          for (int64_t i = 0; i < count; ++i) x[static_cast<size_t>(i)] = value(g.rank(), 0, i);
          comm::allreduce(g, x.data(), x.size(), DType::f32, ReduceOp::sum);
          const std::lock_guard lock(mu);
          if (g.rank() == 0) dense = x;
        }));
        testing::expect_same_bits(run);
        EXPECT_EQ(std::memcmp(run.last[0].data(), dense.data(), dense.size() * sizeof(float)), 0);
        int nonzero = 0;
        for (const float x : dense) nonzero += x != 0;
        if (count >= 1000) {
          EXPECT_GT(nonzero, count / 2) << "the test data is mostly zeros";
        }
        EXPECT_EQ(run.report[0].error_norm, 0.0) << "an exact encoding lost something";
      }
}

// Gradients with a fixed part far larger than their noise: rounding to nearest makes nearly
// the same error every step, so without error feedback the error of the sum over steps grows
// linearly; with it, the error is what the memories hold at the end, bounded by the scales.
float biased_gradient(int rank, int64_t step, int64_t i) {
  return noise(static_cast<uint64_t>(rank), 7, static_cast<uint64_t>(i)) +
         1e-3f * noise(static_cast<uint64_t>(rank), static_cast<uint64_t>(step) + 100,
                       static_cast<uint64_t>(i));
}

TEST(Int8Codec, ErrorFeedbackKeepsTheSumOverStepsWithinABoundIndependentOfSteps) {
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 1000;
  const testing::CodecMaker make = testing::maker(int8_config(256));
  const auto error_after = [&](int64_t steps, bool feedback) {
    const CodecRun run = run_codec(make, kRanks, {kCount}, steps, biased_gradient, !feedback);
    return testing::distance(run.total[0], run.true_total);
  };
  // The error is minus the memories at the end: each worker's float within s_r / 2 and the
  // server's within s' / 2, where |x| <= 1.001 plus a memory gives s_r <= 1.01 / 127 and
  // s' <= N 1.02 / 127: || . || <= sqrt(count) 2 N 1.02 / 254, whatever the number of steps.
  const double bound = std::sqrt(double{kCount}) * 2 * kRanks * 1.02 / 254;
  const double with_50 = error_after(50, true), with_200 = error_after(200, true);
  EXPECT_LE(with_50, bound);
  EXPECT_LE(with_200, bound);
  EXPECT_LT(with_200, 2 * with_50) << "grows with the steps";
  const double without_50 = error_after(50, false), without_200 = error_after(200, false);
  EXPECT_GT(without_200, 3 * without_50) << "the test's gradients do not show error feedback";
  EXPECT_GT(without_200, 10 * bound);
}

// A worker's memory is on every float of the bucket, a server's on its chunk: the report's
// norm is the memories' (here: nonzero, within the one-step bound's sum of squares).
TEST(Int8Codec, ReportsTheErrorFeedbackNorm) {
  const CodecRun run = run_codec(testing::maker(int8_config(64)), 2, {1000}, 1, random_gradient);
  for (const CodecReport& report : run.report) {
    EXPECT_GT(report.error_norm, 0.0);
    EXPECT_LT(report.error_norm, std::sqrt(1000.0) * 2 * 5 / 254.0);
  }
}

// The bytes of every slot sent: 2 (N - 1) (4 ceil(C / G) + round_up(C, 4)), C = ceil(count / N).
TEST(Int8Codec, SendsAQuarterOfFp32PlusTheScales) {
  for (const int64_t group : {int64_t{7}, int64_t{256}})
    for (const int n : {2, 3, 4})
      for (const int64_t count : {1, 7, 1000, 4099}) {
        SCOPED_TRACE("group " + std::to_string(group) + ", ranks " + std::to_string(n) +
                     ", count " + std::to_string(count));
        const CodecRun run =
            run_codec(testing::maker(int8_config(group)), n, {count}, 2, random_gradient);
        const int64_t chunk = (count + n - 1) / n;
        const int64_t slot = 4 * ((chunk + group - 1) / group) + (chunk + 3) / 4 * 4;
        for (const CodecReport& report : run.report) {
          EXPECT_EQ(report.wire_bytes, 2.0 * 2 * (n - 1) * static_cast<double>(slot));
          EXPECT_EQ(report.dense_bytes, 2 * dense_allreduce_bytes(count, n));
        }
        if (count == 4099 && group == 256) {
          EXPECT_GT(run.report[0].ratio(), 3.8) << "not about a quarter of fp32";
        }
      }
}

// One group whose largest float is 127 (scale 1) holding 0.3: nearest always sends 0;
// stochastic rounding sends 1 with probability 0.3, so its mean over steps is 0.3.
TEST(Int8Codec, StochasticRoundingIsUnbiasedAndReproducible) {
  const std::vector<float> x = {127.0f, 0.3f, -0.3f, 0.75f};
  const auto mean_decoded = [&](bool stochastic, uint64_t seed) {
    const Int8Encoder encoder(4, stochastic, seed);
    std::vector<double> sum(x.size(), 0.0);
    std::vector<std::byte> out(encoder.encoded_bytes(4));
    constexpr int kSteps = 4000;
    for (int t = 0; t < kSteps; ++t) {
      std::vector<float> memory(x.size(), 0.0f), decoded(x.size());
      encoder.encode(x.data(), memory.data(), 4, out.data(),
                     {t, EncodeSite::Stage::worker, 1, 2, 8});
      encoder.decode(out.data(), 4, decoded.data());
      for (size_t i = 0; i < x.size(); ++i) sum[i] += decoded[i];
    }
    for (double& s : sum) s /= kSteps;
    return sum;
  };
  const std::vector<double> nearest = mean_decoded(false, 0), stochastic = mean_decoded(true, 3);
  EXPECT_EQ(nearest[1], 0.0);
  EXPECT_EQ(nearest[3], 1.0);
  // Standard deviation of the mean: sqrt(p (1 - p) / 4000) < 0.008; four of them.
  EXPECT_NEAR(stochastic[1], 0.3, 0.03);
  EXPECT_NEAR(stochastic[2], -0.3, 0.03);
  EXPECT_NEAR(stochastic[3], 0.75, 0.03);
  EXPECT_EQ(stochastic[0], 127.0);

  // The same (seed, step, rank, bucket, position) draws the same; another seed does not.
  const auto run = [](uint64_t seed) {
    return run_codec(testing::maker(int8_config(256, true, seed)), 2, {1000}, 2, random_gradient)
        .last[0];
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

TEST(Int8Codec, AnInfinityReachesTheResultAndLeavesNoMemoryBehind) {
  const auto gradient = [](int rank, int64_t step, int64_t i) {
    if (step == 0 && rank == 1 && i == 3) return std::numeric_limits<float>::infinity();
    return random_gradient(rank, step, i);
  };
  const CodecRun run = run_codec(testing::maker(int8_config(4)), 2, {7}, 2, gradient);
  EXPECT_FALSE(std::isfinite(run.total[0][3])) << "step 0 hid the overflow";
  for (const float x : run.last[0]) EXPECT_TRUE(std::isfinite(x)) << "step 1 inherited it";
  EXPECT_TRUE(std::isfinite(run.report[0].error_norm));
}

TEST(Int8Codec, ComesFromTheRegistryAndRefusesAnEmptyGroup) {
  EXPECT_EQ(make_codec(int8_config(256))->name(), "int8");
  EXPECT_NE(std::find(codec_names().begin(), codec_names().end(), "int8"), codec_names().end());
  try {
    make_codec(int8_config(0));
    ADD_FAILURE() << "int8_chunk 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("int8_chunk"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::parallel
