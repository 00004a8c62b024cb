// The plain codecs: gradients summed as they are (fp32), or rounded to bf16 or fp16 for
// the wire, half the bytes (PyTorch's fp16_compress_hook, and bf16's). Every addition of a
// 16-bit sum is done in fp32 and rounded back (core/reduce.h), so with 2 ranks the sum is
// rounded once. No error feedback: the rounding error is relative (2^-8 and 2^-11) and
// unbiased enough that training tracks fp32 (measured in the precision figures).
// Reduce-scatter is native in all three (ZeRO moves half the bytes too).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "parallel/codec.h"
#include "parallel/compressed_allreduce.h"

namespace braid::parallel {

class CastCodec : public GradientCodec {
 public:
  explicit CastCodec(DType wire);  // f32, bf16 or f16

  std::string_view name() const override;
  void prepare(const std::vector<BucketLayout>& buckets, int ranks,
               const WireAllocator& wire) override;
  void allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count, int64_t step) override;
  void reduce_scatter(comm::Group& g, size_t bucket, float* grad, int64_t count, float* chunk_sum,
                      int64_t chunk, int64_t step) override;
  bool plain_sum() const override { return wire_ == DType::f32; }

 private:
  void narrow(const float* in, uint16_t* out, int64_t n) const;
  void widen(const uint16_t* in, float* out, int64_t n) const;

  DType wire_;
  std::vector<uint16_t*> bucket_wire_;  // each bucket's 16-bit copy, padded to N chunks
  std::vector<uint16_t> chunk_out_;     // a reduce-scatter's 16-bit result
};

// bf16 or fp16 as a fixed-size encoding (a parameter-server push, ps_push_codec.h), with
// error feedback, which a push can afford and a 16-bit sum cannot: memory += in, out :=
// memory rounded to the wire type, memory -= the rounded value. Two bytes per float,
// padded to a 4-byte word. A float that rounds to inf or NaN (fp16 past 65504) is sent so
// (the server's optimizer sees the overflow) and its memory cleared.
class CastEncoder : public ChunkEncoder {
 public:
  explicit CastEncoder(DType wire);  // bf16 or f16
  size_t encoded_bytes(int64_t floats) const override;
  double encode(const float* in, float* memory, int64_t n, std::byte* out,
                const EncodeSite& site) const override;
  void decode(const std::byte* in, int64_t n, float* out) const override;
  void decode_add(const std::byte* in, int64_t n, float* sum) const override;

 private:
  DType wire_;
};

}  // namespace braid::parallel
