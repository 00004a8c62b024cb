// What the strategy tests share: two small models, their step options, a global batch
// made from the step number, a rank's shard of it as a distributed sampler deals it, and
// bitwise comparison of parameter vectors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "core/rng.h"
#include "data/loader.h"
#include "parallel/strategy.h"
#include "train/model_spec.h"

namespace braid::parallel::testing {

using nlohmann::json;

// Convolution, batch norm (buffers), dropout (randomness) and two linear layers.
inline json small_cnn() {
  return json::parse(R"({"input": [12, 12, 1], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "stride": 2}, {"type": "batchnorm"},
      {"type": "relu"}, {"type": "flatten"}, {"type": "dropout", "p": 0.2},
      {"type": "linear", "out_features": 16}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})");
}

inline json small_mlp() {
  return json::parse(R"({"input": [12, 12, 1], "layers": [{"type": "flatten"},
      {"type": "linear", "out_features": 24}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})");
}

inline StepOptions options(const char* optimizer) {
  StepOptions o;
  o.optimizer.name = optimizer;
  o.optimizer.momentum = std::string(optimizer) == "sgd" ? 0.9f : 0.0f;
  o.optimizer.weight_decay = 0.01f;
  o.seed = 5;
  return o;
}

// The global batch of step `step`: B images of 12x12 and labels, from the seed.
inline data::Batch global_batch(int64_t B, int64_t step) {
  data::Batch b;
  b.size = B;
  b.inputs = Tensor::empty(Shape{B, 12, 12, 1});
  b.targets = Tensor::empty(Shape{B}, DType::i32);
  Rng rng(1000 + static_cast<uint64_t>(step));
  for (int64_t i = 0; i < b.inputs.numel(); ++i) b.inputs.f32()[i] = rng.normal();
  for (int64_t i = 0; i < B; ++i)
    b.targets.data<int32_t>()[i] = static_cast<int32_t>(rng.below(10));
  return b;
}

// `rows` sequences of `tokens` random token ids below 256 and as many random targets, from
// the seed: a language model's batch.
inline data::Batch token_batch(int64_t rows, int64_t tokens, uint64_t seed) {
  data::Batch b;
  b.size = rows;
  b.inputs = Tensor::empty({rows, tokens}, DType::i32);
  b.targets = Tensor::empty({rows, tokens}, DType::i32);
  Rng rng(seed);
  for (int64_t i = 0; i < rows * tokens; ++i) {
    b.inputs.data<int32_t>()[i] = static_cast<int32_t>(rng.below(256));
    b.targets.data<int32_t>()[i] = static_cast<int32_t>(rng.below(256));
  }
  return b;
}

// Rank r of n's share, as a distributed sampler deals it: rows r, r + n, r + 2n, ...
inline data::Batch shard(const data::Batch& g, int r, int n) {
  const int64_t rows = g.size / n;
  data::Batch b;
  b.size = rows;
  b.inputs = Tensor::empty(Shape{rows, 12, 12, 1});
  b.targets = Tensor::empty(Shape{rows}, DType::i32);
  const int64_t row = 144;
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(b.inputs.f32() + i * row, g.inputs.f32() + (r + i * n) * row, row * sizeof(float));
    b.targets.data<int32_t>()[i] = g.targets.data<int32_t>()[r + i * n];
  }
  return b;
}

inline std::vector<float> params_of(const Strategy& s) {
  return {s.params().params(), s.params().params() + s.params().size()};
}

inline void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b,
                           const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

// The largest |x|: the scale a toleranced comparison of parameters is relative to.
inline float largest(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Whether `count` floats at `data` hash alike on every rank, asked through the strategy's
// own sum over ranks (every rank must call it at the same point).
inline bool same_bits_on_every_rank(Strategy& s, const float* data, int64_t count) {
  const uint64_t h = xxh64(data, static_cast<size_t>(count) * sizeof(float));
  const double mine[2] = {static_cast<double>(h >> 32), static_cast<double>(h & 0xffffffffu)};
  double sum[2] = {mine[0], mine[1]};
  s.sum_over_ranks(sum, 2, "parameter hash");
  const double n = s.world_size();
  return sum[0] == mine[0] * n && sum[1] == mine[1] * n;
}

}  // namespace braid::parallel::testing
