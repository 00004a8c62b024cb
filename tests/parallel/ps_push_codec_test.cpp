// The encodings of parameter-server pushes (ps_push_codec.h): the casts and top-k added for
// pushes round-trip within their bounds, carry every float exactly where they can, and with
// error feedback the sum of what a server decodes over T pushes tracks the sum of what the
// worker meant to push within a bound that does not grow with T; codecs a server cannot
// honour are refused, saying why.
#include "parallel/ps_push_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "expect_error.h"
#include "parallel/codec_cast.h"
#include "parallel/codec_topk.h"

namespace braid::parallel {
namespace {

using Floats = std::vector<float>;

struct Pushed {
  Floats decoded;
  Floats memory;
  double memory_norm2 = 0;
};

// One push of `in` through `e` with the worker's `memory`, decoded as the server would.
Pushed push(const ChunkEncoder& e, const Floats& in, Floats& memory) {
  const auto n = static_cast<int64_t>(in.size());
  std::vector<std::byte> wire(e.encoded_bytes(n));
  Pushed out;
  out.memory_norm2 = e.encode(in.data(), memory.data(), n, wire.data(), EncodeSite{});
  out.decoded.resize(in.size());
  e.decode(wire.data(), n, out.decoded.data());
  out.memory = memory;
  return out;
}

// A gradient of mixed magnitudes and signs, the same every step (so without error feedback
// a biased encoding's loss would add up step after step).
Floats gradient(int64_t n) {
  Floats g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    g[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 13 - 6) + 1e-4f * std::sin(i);
  return g;
}

// ||sum_t decoded_t - T g|| after T pushes of the constant gradient g.
double drift_after(const ChunkEncoder& e, int64_t n, int steps) {
  const Floats g = gradient(n);
  Floats memory(g.size(), 0.0f);
  std::vector<double> sum(g.size(), 0.0);
  for (int t = 0; t < steps; ++t) {
    const Pushed p = push(e, g, memory);
    for (size_t i = 0; i < g.size(); ++i) sum[i] += p.decoded[i];
  }
  double d = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = sum[i] - static_cast<double>(steps) * g[i];
    d += x * x;
  }
  return std::sqrt(d);
}

TEST(CastEncoder, Bf16CarriesItsOwnValuesExactlyAndOthersWithinHalfAnUlp) {
  const CastEncoder e(DType::bf16);
  EXPECT_EQ(e.encoded_bytes(5), 12u) << "2 bytes a float, padded to a word";
  Floats exact = {1.0f, -0.5f, 0.0f, -0.0f, 3.0f, 1024.0f, -7.5f};
  Floats memory(exact.size(), 0.0f);
  const Pushed p = push(e, exact, memory);
  EXPECT_EQ(p.decoded, exact);
  EXPECT_EQ(p.memory_norm2, 0.0);
  const Floats g = gradient(300);
  Floats fresh(g.size(), 0.0f);
  const Pushed q = push(e, g, fresh);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_LE(std::fabs(q.decoded[i] - g[i]), std::ldexp(std::fabs(g[i]), -8)) << i;
    EXPECT_EQ(q.memory[i], g[i] - q.decoded[i]) << "the memory keeps what was lost, " << i;
  }
}

TEST(CastEncoder, ErrorFeedbackKeepsTheSumOfPushesOnTheSumOfGradients) {
  for (const DType wire : {DType::bf16, DType::f16}) {
    const CastEncoder e(wire);
    const double short_run = drift_after(e, 300, 50), long_run = drift_after(e, 300, 800);
    // The drift is the memory, within an ulp of each float: it does not grow with T
    // (rounding 800 times without feedback would drift by up to 800 half-ulps).
    const int mantissa = wire == DType::bf16 ? 8 : 11;  // bits, the implicit one included
    double ulps = 0;
    for (const float g : gradient(300)) ulps += std::pow(std::ldexp(std::fabs(g), 1 - mantissa), 2);
    EXPECT_GT(short_run, 0);
    EXPECT_LT(long_run, 2 * short_run) << dtype_name(wire);
    EXPECT_LT(long_run, std::sqrt(ulps)) << dtype_name(wire);
  }
}

TEST(CastEncoder, Fp16OverflowArrivesAsInfinityAndLeavesNoMemory) {
  const CastEncoder e(DType::f16);
  Floats in = {1e6f, 2.0f, -1e6f};
  Floats memory(in.size(), 0.0f);
  const Pushed p = push(e, in, memory);
  EXPECT_TRUE(std::isinf(p.decoded[0]) && p.decoded[0] > 0);
  EXPECT_TRUE(std::isinf(p.decoded[2]) && p.decoded[2] < 0);
  EXPECT_EQ(p.decoded[1], 2.0f);
  EXPECT_EQ(p.memory, Floats(3, 0.0f));
}

// (A -0.0 arrives as +0.0, as from every encoder: the memory, +0.0, is added to it first.)
TEST(TopkEncoder, EveryFloatKeptIsTheFp32Push) {
  const TopkEncoder e(1.0);
  Floats in = gradient(77);
  in[10] = std::numeric_limits<float>::denorm_min();
  Floats memory(in.size(), 0.0f);
  const Pushed p = push(e, in, memory);
  EXPECT_EQ(std::memcmp(p.decoded.data(), in.data(), in.size() * 4), 0);
  EXPECT_EQ(p.memory, Floats(in.size(), 0.0f));
}

TEST(TopkEncoder, SendsTheLargestAndKeepsTheRest) {
  const TopkEncoder e(0.25);
  const Floats in = {0.1f, -3.0f, 0.2f, 0.0f, 2.0f, -0.3f, 0.05f, 0.4f};
  EXPECT_EQ(e.encoded_bytes(8), 16u) << "2 of 8 floats: 2 indices and 2 values";
  Floats memory(in.size(), 0.0f);
  const Pushed p = push(e, in, memory);
  EXPECT_EQ(p.decoded, (Floats{0, -3.0f, 0, 0, 2.0f, 0, 0, 0}));
  EXPECT_EQ(p.memory, (Floats{0.1f, 0, 0.2f, 0, 0, -0.3f, 0.05f, 0.4f}));
  // The next push adds the memory: 0.4 + 0.4 and -0.3 - 0.3 now lead.
  Floats again = {0, 0, 0, 0, 0, -0.3f, 0, 0.4f};
  const Pushed q = push(e, again, memory);
  EXPECT_EQ(q.decoded, (Floats{0, 0, 0, 0, 0, -0.6f, 0, 0.8f}));
}

TEST(TopkEncoder, ErrorFeedbackKeepsTheSumOfPushesOnTheSumOfGradients) {
  const TopkEncoder e(0.05);
  const double short_run = drift_after(e, 400, 100), long_run = drift_after(e, 400, 1600);
  // Each float waits at most until its memory leads: the drift is bounded by the memory,
  // about n / k gradients' worth, not by T (without feedback the unsent floats' sums would
  // be missing all T of theirs).
  EXPECT_GT(short_run, 0);
  EXPECT_LT(long_run, 2 * short_run);
}

TEST(TopkEncoder, AnIndexPastThePieceIsAnError) {
  const TopkEncoder e(0.5);
  std::vector<std::byte> wire(e.encoded_bytes(4));
  const int32_t bad[2] = {1, 9};
  std::memcpy(wire.data(), bad, sizeof bad);
  Floats out(4);
  expect_error_naming([&] { e.decode(wire.data(), 4, out.data()); }, "names float 9");
}

TEST(PushEncoder, MadeByNameOrRefusedSayingWhy) {
  CodecConfig c;
  EXPECT_EQ(make_push_encoder(c), nullptr) << "none pushes fp32 as it is";
  for (const char* name : {"bf16", "fp16", "int8", "sign"}) {
    c.name = name;
    EXPECT_NE(make_push_encoder(c), nullptr) << name;
  }
  c.name = "topk";
  expect_error_naming([&] { make_push_encoder(c); }, "compression.topk_momentum 0");
  c.topk_momentum = 0;
  EXPECT_NE(make_push_encoder(c), nullptr);
  c.warmup_steps = 10;
  expect_error_naming([&] { make_push_encoder(c); }, "compression.topk_warmup_steps 0");
  c.name = "powersgd";
  expect_error_naming([&] { make_push_encoder(c); }, "allreduces its factors among the workers");
  c.name = "onebit_adam";
  expect_error_naming([&] { make_push_encoder(c); }, "a parameter server runs the optimizer");
  c.name = "zip";
  expect_error_naming([&] { make_push_encoder(c); }, "the codecs are");
}

}  // namespace
}  // namespace braid::parallel
