// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11): the value at
// (key, counter) is a pure function, so any stream position is reached in O(1), runs are
// bitwise reproducible, and a resumed run continues exactly where it stopped: the state
// is just (seed, offset).
#pragma once

#include <array>
#include <cstdint>

namespace braid {

// Four 32-bit random words for a 128-bit counter under a 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0, uint64_t offset = 0)
      : seed_(seed), stream_(stream), offset_(offset) {}

  uint32_t next_u32();
  uint64_t next_u64();
  float uniform();                    // [0, 1)
  float uniform(float lo, float hi);  // [lo, hi)
  float normal();                     // standard normal, Box-Muller
  uint64_t below(uint64_t n);         // uniform in [0, n), n > 0

  // An independent stream for a sub-purpose (a layer's dropout, a sampler's epoch):
  // same seed, distinct stream id.
  Rng fork(uint64_t stream) const {
    return Rng(seed_, stream_ * 0x9E3779B97F4A7C15ull + stream + 1);
  }

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }  // words consumed; saved in checkpoints

 private:
  uint64_t seed_, stream_, offset_;
  std::array<uint32_t, 4> block_{};
  uint64_t block_index_ = ~0ull;
};

}  // namespace braid
