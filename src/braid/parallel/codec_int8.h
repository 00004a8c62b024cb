// The int8 codec ("int8"): every float crosses the wire as one signed byte, with one fp32 scale
// per `int8_chunk` floats (ZeRO++'s block quantisation, Wang et al. 2023; QSGD's stochastic
// rounding, Alistarh et al. 2017), inside the two-phase compressed allreduce
// (compressed_allreduce.h), with error feedback at both stages.
//
// Encoding of a piece of n floats x (the gradient plus its memory): cut into groups of G =
// int8_chunk floats (from the piece's first float; the last group short); a group's scale is
// s = max|x| / 127 (symmetric; 0 for an all-zero group), each float is q = round(x / s) in
// [-127, 127], and decodes to q s. Rounding is to nearest, or with `stochastic_rounding`
// unbiased stochastic rounding (up with probability frac(x / s)) whose uniforms come from
// Philox keyed by the seed at counter (step, stage, rank, bucket, position): reproducible and
// allocation-free. Layout: the ceil(n / G) scales, then the n bytes, padded to 4 bytes.
//
// Error feedback, at both stages: what rounding lost is added to the next step's input. The
// server stage's is needed too: without it the rounding of the sums (deterministic under round
// to nearest) would add up over steps instead of being paid back.
//
// Bound, one step from empty memories, per float i: with s_r the scale of rank r's group of i
// and s' the scale of the summed group of i,
//   |decoded sum - true sum| <= sum_r s_r / 2 + s' / 2 <= sum_r s_r   (round to nearest)
//   |decoded sum - true sum| <  sum_r s_r + s'         <= 2 sum_r s_r (stochastic)
// (s' <= sum_r s_r, as |sum_r q_r s_r| <= 127 sum_r s_r), plus fp32 rounding: a few units in
// the last place of 127 s per operation. Values that are exact multiples of their scale (small
// integers with 127 the largest of every group, summing to integers with 127 the largest)
// pass through bitwise.
//
// Wire: 2 (N - 1) (4 ceil(C / G) + round_up(C, 4)) bytes per bucket with C = ceil(count / N):
// about a quarter of an fp32 ring allreduce, plus the scales.
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/codec.h"
#include "parallel/compressed_allreduce.h"

namespace braid::parallel {

class Int8Encoder : public ChunkEncoder {
 public:
  // `group`: floats per scale (>= 1); `stochastic`: stochastic rounding from `seed`'s stream.
  Int8Encoder(int64_t group, bool stochastic, uint64_t seed);

  size_t encoded_bytes(int64_t floats) const override;
  double encode(const float* in, float* memory, int64_t n, std::byte* out,
                const EncodeSite& site) const override;
  void decode(const std::byte* in, int64_t n, float* out) const override;
  void decode_add(const std::byte* in, int64_t n, float* sum) const override;

 private:
  int64_t groups(int64_t floats) const { return (floats + group_ - 1) / group_; }
  // Quantises x[0, n) (one group) with scale `scale`, 1/scale being `inverse`, into q;
  // x := what was lost. Returns the squared norm of the new x.
  double quantise_group(float* x, int64_t n, float scale, float inverse, int8_t* q,
                        const EncodeSite& site, int64_t first) const;

  int64_t group_;
  bool stochastic_;
  uint64_t seed_;
};

// "int8": the compressed allreduce with Int8Encoder(config.int8_chunk, ...).
std::unique_ptr<GradientCodec> make_int8_codec(const CodecConfig& config);

}  // namespace braid::parallel
