#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace braid {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

uint32_t Rng::next_u32() {
  const uint64_t index = offset_ / 4;
  if (index != block_index_) {
    block_ = philox4x32(seed_, stream_, index);
    block_index_ = index;
  }
  return block_[offset_++ % 4];
}

uint64_t Rng::next_u64() {
  const uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Rng::uniform() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }

float Rng::uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }

float Rng::normal() {
  // 1 - u keeps the log argument in (0, 1].
  const float u1 = 1.0f - uniform();
  const float u2 = uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(2.0f * std::numbers::pi_v<float> * u2);
}

uint64_t Rng::below(uint64_t n) {
  // Lemire's multiply-shift with rejection: unbiased.
  uint64_t x = next_u32();
  uint64_t m = x * n;
  uint32_t low = static_cast<uint32_t>(m);
  if (n <= 0xFFFFFFFFull && low < static_cast<uint32_t>(n)) {
    const uint32_t threshold =
        static_cast<uint32_t>(-static_cast<uint32_t>(n) % static_cast<uint32_t>(n));
    while (low < threshold) {
      x = next_u32();
      m = x * n;
      low = static_cast<uint32_t>(m);
    }
  }
  if (n > 0xFFFFFFFFull) return next_u64() % n;  // rare: huge ranges, negligible bias
  return m >> 32;
}

}  // namespace braid
