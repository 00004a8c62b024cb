// The sign codec ("sign"): 1-bit SGD (Seide et al., Interspeech 2014) with error feedback
// (EF-SignSGD, Karimireddy et al., ICML 2019), inside the two-phase compressed allreduce
// (compressed_allreduce.h) as DeepSpeed's 1-bit Adam runs it (Tang et al., ICML 2021): worker
// and server error feedback both.
//
// Encoding of a piece of n floats x (the gradient plus its memory): one fp32 scale
// s = mean |x| = ||x||_1 / n, and one bit per float, set where x < 0 (zero counts as positive);
// x decodes to s sign(x). Layout: the scale, then the bits 8 per byte (bit k of byte b is float
// 8 b + k), padded to a 4-byte word. The scale is the one that minimises ||x - s sign(x)||, so
// the loss is ||x||^2 - n s^2 <= ||x||^2: a contraction by delta = ||x||_1^2 / (n ||x||_2^2),
// which is what keeps the error-feedback memory bounded over steps.
//
// Wire: 2 (N - 1) (4 + 4 ceil(C / 32)) bytes per bucket with C = ceil(count / N): about 1/32
// of an fp32 ring allreduce.
#pragma once

#include <memory>

#include "parallel/codec.h"
#include "parallel/compressed_allreduce.h"

namespace braid::parallel {

class SignEncoder : public ChunkEncoder {
 public:
  size_t encoded_bytes(int64_t floats) const override;
  double encode(const float* in, float* memory, int64_t n, std::byte* out,
                const EncodeSite& site) const override;
  void decode(const std::byte* in, int64_t n, float* out) const override;
  void decode_add(const std::byte* in, int64_t n, float* sum) const override;
};

// "sign": the compressed allreduce with SignEncoder.
std::unique_ptr<GradientCodec> make_sign_codec();

}  // namespace braid::parallel
