// The sign codec ("sign"): 1-bit SGD (Seide et al., Interspeech 2014) with error feedback
// (EF-SignSGD, Karimireddy et al., ICML 2019), inside the two-phase compressed allreduce
// (compressed_allreduce.h) as DeepSpeed's 1-bit Adam runs it (Tang et al., ICML 2021): worker
// and server error feedback both.
//
// Encoding of a piece of n floats x (the gradient plus its memory), in blocks of B floats
// (compression.sign_chunk, 32 by default): one fp32 scale s = mean |x| per block, and one
// bit per float, set where x < 0 (zero counts as positive); x decodes to s sign(x). Layout:
// the ceil(n / B) scales, then the bits 8 per byte (bit k of byte b is float 8 b + k), padded
// to a 4-byte word. Within a block the scale is the one that minimises ||x - s sign(x)||, so
// the loss is ||x||^2 - B s^2 <= ||x||^2: a contraction by delta = ||x||_1^2 / (B ||x||_2^2),
// which is what keeps the error-feedback memory bounded over steps. A scale per block, not per
// chunk: a chunk spans layers whose gradients differ by orders of magnitude, and one mean |x|
// over them gave the small ones steps far too large (a cnn on 2 ranks stayed at chance).
// The smaller the block, the closer delta is to 1 on heavy-tailed gradients: on the cnn (5
// epochs, 2 ranks, SGD) B = 4096 stayed at chance, 256 lost 8.4 points, 32 lost 3.4.
//
// Wire: 2 (N - 1) (4 ceil(C / B) + 4 ceil(C / 32)) bytes per bucket with C = ceil(count / N):
// about 1/16 of an fp32 ring allreduce at B = 32 (1/28 at B = 256).
#pragma once

#include <memory>

#include "parallel/codec.h"
#include "parallel/compressed_allreduce.h"

namespace braid::parallel {

class SignEncoder : public ChunkEncoder {
 public:
  explicit SignEncoder(int64_t block);  // a positive multiple of 32
  size_t encoded_bytes(int64_t floats) const override;
  double encode(const float* in, float* memory, int64_t n, std::byte* out,
                const EncodeSite& site) const override;
  void decode(const std::byte* in, int64_t n, float* out) const override;
  void decode_add(const std::byte* in, int64_t n, float* sum) const override;

 private:
  int64_t block_;
};

// "sign": the compressed allreduce with SignEncoder.
std::unique_ptr<GradientCodec> make_sign_codec(const CodecConfig& config);

}  // namespace braid::parallel
