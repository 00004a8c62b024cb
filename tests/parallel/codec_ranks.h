// Test harness for gradient codecs: N ranks as threads run a codec over buckets for a number
// of steps, on gradients given as a function of (rank, step, float), and report what each rank
// ended with, beside the dense fp32 sums computed here in double.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/inproc_ranks.h"
#include "parallel/codec.h"

namespace braid::parallel::testing {

// Rank r's gradient at `step` for the float at `index` of the concatenated buckets.
using GradientFn = std::function<float(int rank, int64_t step, int64_t index)>;
// Makes the codec under test (once per rank, or once per step with fresh_each_step).
using CodecMaker = std::function<std::unique_ptr<GradientCodec>()>;

struct CodecRun {
  std::vector<std::vector<float>> last;    // [rank]: the last step's result, buckets concatenated
  std::vector<std::vector<double>> total;  // [rank]: the results summed over steps
  std::vector<double> true_total;          // the true gradients summed over ranks and steps
  std::vector<double> true_last;           // the last step's true sum over ranks
  std::vector<CodecReport> report;         // [rank]: take_report() after all steps
};

inline std::vector<BucketLayout> layouts(const std::vector<int64_t>& sizes) {
  std::vector<BucketLayout> out;
  int64_t begin = 0;
  for (const int64_t size : sizes) {
    BucketLayout b;
    b.begin = begin;
    b.end = begin + size;
    b.tensors.push_back({0, size, 1});
    out.push_back(b);
    begin += size;
  }
  return out;
}

// Private, zeroed wire memory that lives as long as `holder`.
inline WireAllocator wire_into(std::vector<std::vector<std::byte>>& holder) {
  return [&holder](size_t bytes) -> void* {
    holder.emplace_back(bytes, std::byte{0});
    return holder.back().data();
  };
}

// With fresh_each_step, each step gets a new codec: no memory survives a step, which is the
// codec without error feedback.
inline CodecRun run_codec(const CodecMaker& make, int ranks, const std::vector<int64_t>& buckets,
                          int64_t steps, const GradientFn& gradient, bool fresh_each_step = false) {
  int64_t floats = 0;
  for (const int64_t b : buckets) floats += b;
  CodecRun run;
  run.last.resize(static_cast<size_t>(ranks));
  run.total.assign(static_cast<size_t>(ranks), std::vector<double>(static_cast<size_t>(floats)));
  run.report.resize(static_cast<size_t>(ranks));
  run.true_total.assign(static_cast<size_t>(floats), 0.0);
  run.true_last.assign(static_cast<size_t>(floats), 0.0);
  for (int64_t t = 0; t < steps; ++t)
    for (int r = 0; r < ranks; ++r)
      for (int64_t i = 0; i < floats; ++i) {
        const double g = gradient(r, t, i);
        run.true_total[static_cast<size_t>(i)] += g;
        if (t == steps - 1) run.true_last[static_cast<size_t>(i)] += g;
      }
  comm::testing::rethrow_first(comm::testing::run_group(ranks, [&](comm::Group& g) {
    const int r = g.rank();
    std::vector<std::vector<std::byte>> wire;
    std::unique_ptr<GradientCodec> codec;
    CodecReport report;
    std::vector<float> grad(static_cast<size_t>(floats));
    std::vector<double>& total = run.total[static_cast<size_t>(r)];
    for (int64_t t = 0; t < steps; ++t) {
      if (!codec || fresh_each_step) {
        if (codec) {
          const CodecReport was = codec->take_report();
          report.wire_bytes += was.wire_bytes;
          report.dense_bytes += was.dense_bytes;
        }
        codec = make();
        codec->prepare(layouts(buckets), ranks, wire_into(wire));
      }
      for (int64_t i = 0; i < floats; ++i) grad[static_cast<size_t>(i)] = gradient(r, t, i);
      int64_t begin = 0;
      for (size_t b = 0; b < buckets.size(); ++b) {
        codec->allreduce(g, b, grad.data() + begin, buckets[b], t);
        begin += buckets[b];
      }
      for (int64_t i = 0; i < floats; ++i)
        total[static_cast<size_t>(i)] += grad[static_cast<size_t>(i)];
    }
    const CodecReport last = codec->take_report();
    report.wire_bytes += last.wire_bytes;
    report.dense_bytes += last.dense_bytes;
    report.error_norm = last.error_norm;
    run.report[static_cast<size_t>(r)] = report;
    run.last[static_cast<size_t>(r)] = grad;
  }));
  return run;
}

inline CodecMaker maker(const CodecConfig& config) {
  return [config] { return make_codec(config); };
}

// Every rank ended with rank 0's bits.
inline void expect_same_bits(const CodecRun& run) {
  for (size_t r = 1; r < run.last.size(); ++r) {
    ASSERT_EQ(run.last[r].size(), run.last[0].size());
    EXPECT_EQ(
        std::memcmp(run.last[r].data(), run.last[0].data(), run.last[0].size() * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  }
}

// || a - b ||_2
inline double distance(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), a pure function of its arguments.
inline float noise(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = mix(mix(mix(a) ^ b) ^ c);
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// A rank's gradient at a step: noise whose magnitude varies across the floats (so chunk and
// block scales differ).
inline float random_gradient(int rank, int64_t step, int64_t i) {
  return noise(static_cast<uint64_t>(rank), static_cast<uint64_t>(step), static_cast<uint64_t>(i)) *
         (1.0f + static_cast<float>(i % 5));
}

}  // namespace braid::parallel::testing
