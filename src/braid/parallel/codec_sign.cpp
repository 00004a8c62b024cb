#include "parallel/codec_sign.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace braid::parallel {

SignEncoder::SignEncoder(int64_t block) : block_(block) {
  BRAID_CHECK(block_ > 0 && block_ % 32 == 0, "codec sign: compression.sign_chunk must be a ",
              "positive multiple of 32 (a scale per whole words of bits), got ", block_);
}

size_t SignEncoder::encoded_bytes(int64_t floats) const {
  return static_cast<size_t>(4 * ((floats + block_ - 1) / block_) + (floats + 31) / 32 * 4);
}

// Per block of block_ floats: memory += in, the scale mean |memory| (eight lanes added in a
// fixed order: the same bits wherever the block lies in memory), then the bits eight per
// byte and memory -= the decoded value. Returns the squared norm of what was lost.
double SignEncoder::encode(const float* in, float* memory, int64_t n, std::byte* out,
                           const EncodeSite& /*site*/) const {
  const int64_t blocks = (n + block_ - 1) / block_;
  auto* bits = reinterpret_cast<unsigned char*>(out + 4 * blocks);
  std::memset(bits, 0, static_cast<size_t>((n + 31) / 32 * 4));
  double lost = 0;
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t lo = j * block_, hi = std::min(n, lo + block_);
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8)
      for (int k = 0; k < 8; ++k) {
        memory[i + k] += in[i + k];
        lanes[k] += std::fabs(memory[i + k]);
      }
    for (; i < hi; ++i) {
      memory[i] += in[i];
      lanes[0] += std::fabs(memory[i]);
    }
    const double l1 = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                      ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    float scale = static_cast<float>(l1 / static_cast<double>(hi - lo));
    if (!std::isfinite(scale)) {
      // A NaN scale decodes the block to NaN: the overflow reaches the loss scaler, and the
      // memory starts over instead of carrying inf into every later step.
      scale = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(out + 4 * j, &scale, sizeof(float));
      std::fill(memory + lo, memory + hi, 0.0f);
      continue;
    }
    std::memcpy(out + 4 * j, &scale, sizeof(float));
    double squares[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (i = lo; i + 8 <= hi; i += 8) {
      unsigned byte = 0;
      for (int k = 0; k < 8; ++k) {
        const bool below = memory[i + k] < 0;
        byte |= (below ? 1u : 0u) << k;
        memory[i + k] -= below ? -scale : scale;
        squares[k] += static_cast<double>(memory[i + k]) * memory[i + k];
      }
      bits[i / 8] = static_cast<unsigned char>(byte);
    }
    for (; i < hi; ++i) {
      const bool below = memory[i] < 0;
      bits[i / 8] |= static_cast<unsigned char>((below ? 1u : 0u) << (i % 8));
      memory[i] -= below ? -scale : scale;
      squares[0] += static_cast<double>(memory[i]) * memory[i];
    }
    lost += ((squares[0] + squares[1]) + (squares[2] + squares[3])) +
            ((squares[4] + squares[5]) + (squares[6] + squares[7]));
  }
  return lost;
}

void SignEncoder::decode(const std::byte* in, int64_t n, float* out) const {
  std::fill(out, out + n, 0.0f);
  decode_add(in, n, out);
}

void SignEncoder::decode_add(const std::byte* in, int64_t n, float* sum) const {
  const int64_t blocks = (n + block_ - 1) / block_;
  const auto* bits = reinterpret_cast<const unsigned char*>(in + 4 * blocks);
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t lo = j * block_, hi = std::min(n, lo + block_);
    float scale;
    std::memcpy(&scale, in + 4 * j, sizeof(float));
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
      const unsigned byte = bits[i / 8];
      for (int k = 0; k < 8; ++k) sum[i + k] += (byte >> k & 1u) != 0 ? -scale : scale;
    }
    for (; i < hi; ++i) sum[i] += (bits[i / 8] >> (i % 8) & 1u) != 0 ? -scale : scale;
  }
}

std::unique_ptr<GradientCodec> make_sign_codec(const CodecConfig& config) {
  return std::make_unique<CompressedAllreduce>("sign",
                                               std::make_unique<SignEncoder>(config.sign_chunk));
}

}  // namespace braid::parallel
