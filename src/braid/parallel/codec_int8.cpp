#include "parallel/codec_int8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/rng.h"

namespace braid::parallel {
namespace {

constexpr float kLevels = 127;  // symmetric: -127..127, so -128 is never sent

// The uniforms of stochastic rounding, four per Philox block: the key is the seed, the counter
// (step, stage) in its high word and (rank, bucket, position / 4) in its low word, with 16 bits
// for the rank, 16 for the bucket and 32 for the position's block (beyond these the streams
// overlap: correlated roundings, never a wrong result).
class RoundingUniforms {
 public:
  RoundingUniforms(uint64_t seed, const EncodeSite& site)
      : seed_(seed),
        high_(static_cast<uint64_t>(site.step) * 2 + static_cast<uint64_t>(site.stage)),
        low_(static_cast<uint64_t>(site.rank) << 48 | static_cast<uint64_t>(site.bucket) << 32) {}

  // In [0, 1), for the float at bucket position `position`.
  float at(int64_t position) {
    const uint64_t index = static_cast<uint64_t>(position) >> 2;
    if (index != block_index_) {
      block_ = philox4x32(seed_, high_, low_ | (index & 0xFFFFFFFFull));
      block_index_ = index;
    }
    return static_cast<float>(block_[position & 3] >> 8) * (1.0f / 16777216.0f);
  }

 private:
  uint64_t seed_, high_, low_;
  std::array<uint32_t, 4> block_{};
  uint64_t block_index_ = ~0ull;
};

}  // namespace

Int8Encoder::Int8Encoder(int64_t group, bool stochastic, uint64_t seed)
    : group_(group), stochastic_(stochastic), seed_(seed) {
  BRAID_CHECK(group >= 1, "int8 codec: compression.int8_chunk must be at least 1 float, got ",
              group);
}

size_t Int8Encoder::encoded_bytes(int64_t floats) const {
  return static_cast<size_t>(groups(floats) * 4 + (floats + 3) / 4 * 4);
}

double Int8Encoder::quantise_group(float* x, int64_t n, float scale, float inverse, int8_t* q,
                                   const EncodeSite& site, int64_t first) const {
  double square_norm = 0;
  RoundingUniforms uniforms(seed_, site);
  for (int64_t i = 0; i < n; ++i) {
    const float y = x[i] * inverse;
    float level = stochastic_ ? std::floor(y) : std::nearbyint(y);
    if (stochastic_ && uniforms.at(first + i) < y - level) level += 1;
    level = std::clamp(level, -kLevels, kLevels);  // y may pass 127 by an ulp
    q[i] = static_cast<int8_t>(level);
    x[i] -= level * scale;
    square_norm += static_cast<double>(x[i]) * x[i];
  }
  return square_norm;
}

double Int8Encoder::encode(const float* in, float* memory, int64_t n, std::byte* out,
                           const EncodeSite& site) const {
  std::byte* scales = out;
  auto* q = reinterpret_cast<int8_t*>(out + groups(n) * 4);
  std::memset(q, 0, encoded_bytes(n) - static_cast<size_t>(groups(n)) * 4);  // bytes and padding
  double square_norm = 0;
  for (int64_t lo = 0, g = 0; lo < n; lo += group_, ++g) {
    const int64_t len = std::min(group_, n - lo);
    float* x = memory + lo;
    float peak = 0;
    bool finite = true;
    for (int64_t i = 0; i < len; ++i) {
      x[i] += in[lo + i];
      finite = finite && std::isfinite(x[i]);
      peak = std::max(peak, std::fabs(x[i]));
    }
    float scale = peak / kLevels;
    if (!finite) {
      // A NaN scale decodes the whole group to NaN: the overflow reaches the loss scaler, and
      // the memory starts over instead of carrying inf into every later step.
      scale = std::numeric_limits<float>::quiet_NaN();
      std::fill(x, x + len, 0.0f);
    } else if (const float inverse = kLevels / peak; std::isfinite(inverse)) {
      square_norm += quantise_group(x, len, scale, inverse, q + lo, site, site.first + lo);
    } else {
      // Zero, or too small to invert (subnormal): sent as zeros, kept whole in the memory.
      scale = 0;
      for (int64_t i = 0; i < len; ++i) square_norm += static_cast<double>(x[i]) * x[i];
    }
    std::memcpy(scales + g * 4, &scale, sizeof(float));
  }
  return square_norm;
}

void Int8Encoder::decode(const std::byte* in, int64_t n, float* out) const {
  const auto* q = reinterpret_cast<const int8_t*>(in + groups(n) * 4);
  for (int64_t lo = 0, g = 0; lo < n; lo += group_, ++g) {
    float scale;
    std::memcpy(&scale, in + g * 4, sizeof(float));
    const int64_t hi = std::min(n, lo + group_);
    for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<float>(q[i]) * scale;
  }
}

void Int8Encoder::decode_add(const std::byte* in, int64_t n, float* sum) const {
  const auto* q = reinterpret_cast<const int8_t*>(in + groups(n) * 4);
  for (int64_t lo = 0, g = 0; lo < n; lo += group_, ++g) {
    float scale;
    std::memcpy(&scale, in + g * 4, sizeof(float));
    const int64_t hi = std::min(n, lo + group_);
    for (int64_t i = lo; i < hi; ++i) sum[i] += static_cast<float>(q[i]) * scale;
  }
}

std::unique_ptr<GradientCodec> make_int8_codec(const CodecConfig& config) {
  return std::make_unique<CompressedAllreduce>(
      "int8",
      std::make_unique<Int8Encoder>(config.int8_chunk, config.stochastic_rounding, config.seed));
}

}  // namespace braid::parallel
