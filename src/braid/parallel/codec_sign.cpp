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

// Eight floats per byte, in blocks the compiler vectorises: the sum of |x| runs in eight
// lanes added in a fixed order (the same bits wherever the chunk lies in memory).
double SignEncoder::encode(const float* in, float* memory, int64_t n, std::byte* out,
                           const EncodeSite& /*site*/) const {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      memory[i + k] += in[i + k];
      lanes[k] += std::fabs(memory[i + k]);
    }
  for (; i < n; ++i) {
    memory[i] += in[i];
    lanes[0] += std::fabs(memory[i]);
  }
  const double l1 = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  auto* bits = reinterpret_cast<unsigned char*>(out + 4);
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
  double squares[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (i = 0; i + 8 <= n; i += 8) {
    unsigned byte = 0;
    for (int k = 0; k < 8; ++k) {
      const bool below = memory[i + k] < 0;
      byte |= (below ? 1u : 0u) << k;
      memory[i + k] -= below ? -scale : scale;
      squares[k] += static_cast<double>(memory[i + k]) * memory[i + k];
    }
    bits[i / 8] = static_cast<unsigned char>(byte);
  }
  for (; i < n; ++i) {
    const bool below = memory[i] < 0;
    bits[i / 8] |= static_cast<unsigned char>((below ? 1u : 0u) << (i % 8));
    memory[i] -= below ? -scale : scale;
    squares[0] += static_cast<double>(memory[i]) * memory[i];
  }
  return ((squares[0] + squares[1]) + (squares[2] + squares[3])) +
         ((squares[4] + squares[5]) + (squares[6] + squares[7]));
}

void SignEncoder::decode(const std::byte* in, int64_t n, float* out) const {
  std::fill(out, out + n, 0.0f);
  decode_add(in, n, out);
}

void SignEncoder::decode_add(const std::byte* in, int64_t n, float* sum) const {
  const float scale = read_scale(in);
  const auto* bits = reinterpret_cast<const unsigned char*>(in + 4);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const unsigned byte = bits[i / 8];
    for (int k = 0; k < 8; ++k) sum[i + k] += (byte >> k & 1u) != 0 ? -scale : scale;
  }
  for (; i < n; ++i) sum[i] += negative(in + 4, i) ? -scale : scale;
}

std::unique_ptr<GradientCodec> make_sign_codec() {
  return std::make_unique<CompressedAllreduce>("sign", std::make_unique<SignEncoder>());
}

}  // namespace braid::parallel
