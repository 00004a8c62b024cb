// The two-phase compressed allreduce on its own, with a lossless encoder (fp32 as it is, plus a
// header word): the exchange must then be an fp32 sum in rank order, bitwise, on every rank, for
// any count and group size, and its reduce-scatter the same bits as its allreduce's chunk.
#include "parallel/compressed_allreduce.h"

#include <gtest/gtest.h>

#include <cstring>

#include "comm/collectives.h"
#include "parallel/codec_ranks.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;
using testing::CodecRun;
using testing::layouts;
using testing::run_codec;
using testing::wire_into;

// Lossless: a word holding the float count (so a decode of the wrong slot length shows), then
// the floats. Its memory ends at zero every step.
class PlainEncoder : public ChunkEncoder {
 public:
  size_t encoded_bytes(int64_t floats) const override {
    return 4 + static_cast<size_t>(floats) * 4;
  }
  double encode(const float* in, float* memory, int64_t n, std::byte* out,
                const EncodeSite& /*site*/) const override {
    const auto length = static_cast<int32_t>(n);
    std::memcpy(out, &length, 4);
    for (int64_t i = 0; i < n; ++i) memory[i] += in[i];
    std::memcpy(out + 4, memory, static_cast<size_t>(n) * 4);
    std::fill(memory, memory + n, 0.0f);
    return 0;
  }
  void decode(const std::byte* in, int64_t n, float* out) const override {
    check_length(in, n);
    std::memcpy(out, in + 4, static_cast<size_t>(n) * 4);
  }
  void decode_add(const std::byte* in, int64_t n, float* sum) const override {
    check_length(in, n);
    for (int64_t i = 0; i < n; ++i) {
      float x;
      std::memcpy(&x, in + 4 + i * 4, 4);
      sum[i] += x;
    }
  }

 private:
  static void check_length(const std::byte* in, int64_t n) {
    int32_t length;
    std::memcpy(&length, in, 4);
    ASSERT_EQ(length, n) << "decoded a slot of another length";
  }
};

testing::CodecMaker plain() {
  return [] {
    return std::make_unique<CompressedAllreduce>("plain", std::make_unique<PlainEncoder>());
  };
}

float gradient(int rank, int64_t step, int64_t i) {
  // Not integers, so the order of the additions shows in the bits.
  return 0.1f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>((i * 7 + step) % 101) -
         0.37f * static_cast<float>(i % 3);
}

TEST(CompressedAllreduce, LosslessEncoderGivesTheRankOrderSumOnEveryRank) {
  for (const int n : {1, 2, 3, 4})
    for (const int64_t count : {1, 7, 1000, 4099}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + ", count " + std::to_string(count));
      const CodecRun run = run_codec(plain(), n, {count}, 1, gradient);
      testing::expect_same_bits(run);
      for (int64_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += gradient(r, 0, i);
        ASSERT_EQ(run.last[0][static_cast<size_t>(i)], want) << "float " << i;
      }
      // 2 (N - 1) slots of 4 + 4 C bytes, C = ceil(count / N).
      const double slot = 4.0 + 4.0 * static_cast<double>((count + n - 1) / n);
      EXPECT_EQ(run.report[0].wire_bytes, 2.0 * (n - 1) * slot);
      EXPECT_EQ(run.report[0].dense_bytes, dense_allreduce_bytes(count, n));
      EXPECT_EQ(run.report[0].error_norm, 0.0);
    }
}

TEST(CompressedAllreduce, BucketsOfSeveralSizesShareTheWireBuffers) {
  const std::vector<int64_t> buckets = {5, 1000, 1, 37};
  const CodecRun run = run_codec(plain(), 3, buckets, 3, gradient);
  testing::expect_same_bits(run);
  for (size_t i = 0; i < run.true_last.size(); ++i) {
    float want = 0;
    for (int r = 0; r < 3; ++r) want += gradient(r, 2, static_cast<int64_t>(i));
    ASSERT_EQ(run.last[0][i], want) << "float " << i;
  }
}

// ZeRO's form: each rank's chunk of the sum, the same bits as the allreduce's, and only the
// all-to-all's bytes.
TEST(CompressedAllreduce, ReduceScatterIsTheAllreducesChunkForHalfTheBytes) {
  for (const int n : {2, 3, 4})
    for (const int64_t count : {1, 7, 1000, 4099}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + ", count " + std::to_string(count));
      const int64_t chunk = (count + n - 1) / n;
      const CodecRun full = run_codec(plain(), n, {count}, 1, gradient);
      rethrow_first(run_group(n, [&](comm::Group& g) {
        std::vector<std::vector<std::byte>> wire;
        CompressedAllreduce codec("plain", std::make_unique<PlainEncoder>());
        codec.prepare(layouts({count}), n, wire_into(wire));
        std::vector<float> grad(static_cast<size_t>(n * chunk), 0.0f),
            mine(static_cast<size_t>(chunk), -1.0f);
        for (int64_t i = 0; i < count; ++i) grad[static_cast<size_t>(i)] = gradient(g.rank(), 0, i);
        codec.reduce_scatter(g, 0, grad.data(), count, mine.data(), chunk, 0);
        for (int64_t k = 0; k < chunk; ++k) {
          const int64_t i = g.rank() * chunk + k;
          const float want = i < count ? full.last[0][static_cast<size_t>(i)] : 0.0f;
          ASSERT_EQ(mine[static_cast<size_t>(k)], want) << "rank " << g.rank() << " float " << k;
        }
        const CodecReport report = codec.take_report();
        EXPECT_EQ(report.wire_bytes, (n - 1) * (4.0 + 4.0 * static_cast<double>(chunk)));
      }));
    }
}

TEST(CompressedAllreduce, RefusesAGroupOfAnotherSizeOrAnUnknownBucket) {
  const auto errors = run_group(2, [&](comm::Group& g) {
    std::vector<std::vector<std::byte>> wire;
    CompressedAllreduce codec("plain", std::make_unique<PlainEncoder>());
    codec.prepare(layouts({10}), 3, wire_into(wire));
    std::vector<float> grad(10, 1.0f);
    try {
      codec.allreduce(g, 0, grad.data(), 10, 0);
      ADD_FAILURE() << "a codec prepared for 3 ranks ran on 2";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("prepared for 3 ranks"), std::string::npos) << e.what();
    }
    CompressedAllreduce other("plain", std::make_unique<PlainEncoder>());
    other.prepare(layouts({10}), 2, wire_into(wire));
    try {
      other.allreduce(g, 1, grad.data(), 10, 0);
      ADD_FAILURE() << "bucket 1 of 1 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bucket 1"), std::string::npos) << e.what();
    }
  });
  rethrow_first(errors);
}

}  // namespace
}  // namespace braid::parallel
