#include "parallel/codec_sign.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace braid::parallel {
namespace {

bool negative(const std::byte* bits, int64_t i) {
  return (static_cast<unsigned>(bits[i / 8]) >> (i % 8) & 1u) != 0;
}

float read_scale(const std::byte* in) {
  float scale;
  std::memcpy(&scale, in, sizeof(float));
  return scale;
}

}  // namespace

size_t SignEncoder::encoded_bytes(int64_t floats) const {
  return static_cast<size_t>(4 + (floats + 31) / 32 * 4);
}

double SignEncoder::encode(const float* in, float* memory, int64_t n, std::byte* out,
                           const EncodeSite& /*site*/) const {
  double l1 = 0;
  for (int64_t i = 0; i < n; ++i) {
    memory[i] += in[i];
    l1 += std::fabs(memory[i]);
  }
  std::byte* bits = out + 4;
  std::memset(bits, 0, encoded_bytes(n) - 4);
  float scale = n > 0 ? static_cast<float>(l1 / static_cast<double>(n)) : 0.0f;
  if (!std::isfinite(scale)) {
    // A NaN scale decodes the whole piece to NaN: the overflow reaches the loss scaler, and
    // the memory starts over instead of carrying inf into every later step.
    scale = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(out, &scale, sizeof(float));
    std::fill(memory, memory + n, 0.0f);
    return 0;
  }
  std::memcpy(out, &scale, sizeof(float));
  double square_norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool below = memory[i] < 0;
    bits[i / 8] |= std::byte{static_cast<unsigned char>(below ? 1u << (i % 8) : 0u)};
    memory[i] -= below ? -scale : scale;
    square_norm += static_cast<double>(memory[i]) * memory[i];
  }
  return square_norm;
}

void SignEncoder::decode(const std::byte* in, int64_t n, float* out) const {
  const float scale = read_scale(in);
  for (int64_t i = 0; i < n; ++i) out[i] = negative(in + 4, i) ? -scale : scale;
}

void SignEncoder::decode_add(const std::byte* in, int64_t n, float* sum) const {
  const float scale = read_scale(in);
  for (int64_t i = 0; i < n; ++i) sum[i] += negative(in + 4, i) ? -scale : scale;
}

std::unique_ptr<GradientCodec> make_sign_codec() {
  return std::make_unique<CompressedAllreduce>("sign", std::make_unique<SignEncoder>());
}

}  // namespace braid::parallel
