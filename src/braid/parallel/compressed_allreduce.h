// The two-phase compressed allreduce that the quantising codecs (int8, sign) share: DeepSpeed's
// 1-bit compressed allreduce (Tang et al., "1-bit Adam", ICML 2021, section 3.3) and ZeRO++'s
// quantised reduce-scatter (Wang et al., 2023), with error feedback at both stages.
//
// How it works, for a bucket of `count` floats over N ranks:
// - Chunks: the bucket is cut into N chunks of C = ceil(count / N) floats (the last ones short
//   or empty); chunk j is rank j's to sum. Every chunk is encoded into a slot of the same size,
//   encoded_bytes(C), so the collectives' counts are fixed.
// - Phase 1 (worker): each rank adds its worker error-feedback memory to its gradient, encodes
//   its N chunks and keeps what the encoding lost in that memory; an all-to-all gives rank j
//   every rank's chunk j, which it decodes and sums in rank order 0..N-1 in fp32.
// - Phase 2 (server): rank j adds its server error-feedback memory (one chunk) to that sum,
//   encodes it, keeps the loss, and an all-gather of the encoded sums gives every rank all N
//   chunk sums, which it decodes into the bucket. Every rank decodes the same bytes, so every
//   rank ends with the same bits.
// - Error feedback (Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019): with the
//   worker memories m_r and the server memories M, the sum of the decoded buckets over steps
//   0..T-1 is the sum of the true gradients minus (sum_r m_r + M) at step T, up to fp32
//   rounding: the difference does not grow with T when the memories stay bounded.
// - Wire: this rank sends (N - 1) slots in the all-to-all and (N - 1) in the all-gather (ring or
//   direct, each peer gets every other slot once): 2 (N - 1) encoded_bytes(C) bytes.
// - ZeRO: reduce_scatter() stops after phase 2 (rank j decodes its own encoded sum: the bits the
//   all-gather would have given it), half the bytes; for chunks other than ceil(count / N) it
//   falls back to the default (allreduce, then the chunk).
// - Non-finite gradients: an encoder that meets inf or NaN in a piece of its input writes a
//   non-finite scale (the decoded piece is not finite, so loss scaling sees the overflow) and
//   clears that piece's memory, so the next step starts clean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/codec.h"

namespace braid::parallel {

// Where an encoding happens, for encoders that draw random numbers (stochastic rounding): the
// draws are a pure function of (seed, step, stage, rank, bucket, position).
struct EncodeSite {
  enum class Stage : uint8_t { worker = 0, server = 1 };
  int64_t step = 0;
  Stage stage = Stage::worker;
  int rank = 0;       // the rank encoding
  size_t bucket = 0;  // the bucket's index
  int64_t first = 0;  // the bucket position of the first float encoded
};

// A fixed-size encoding of a piece of floats with error feedback. Stateless (the memory is the
// caller's), so one encoder serves every bucket; methods are const and may run on any thread.
class ChunkEncoder {
 public:
  virtual ~ChunkEncoder() = default;
  // Bytes the encoding of `floats` floats takes: a multiple of 4 (the wire moves i32 words),
  // nondecreasing in `floats`.
  virtual size_t encoded_bytes(int64_t floats) const = 0;
  // memory[0, n) += in[0, n); out[0, encoded_bytes(n)) := encode(memory); memory -= decode(out).
  // Returns the squared L2 norm of the new memory[0, n).
  virtual double encode(const float* in, float* memory, int64_t n, std::byte* out,
                        const EncodeSite& site) const = 0;
  // out[0, n) := decode(in).
  virtual void decode(const std::byte* in, int64_t n, float* out) const = 0;
  // sum[0, n) += decode(in), one fp32 addition per float.
  virtual void decode_add(const std::byte* in, int64_t n, float* sum) const = 0;
};

class CompressedAllreduce : public GradientCodec {
 public:
  CompressedAllreduce(std::string name, std::unique_ptr<ChunkEncoder> encoder);

  std::string_view name() const override { return name_; }
  void prepare(const std::vector<BucketLayout>& buckets, int ranks,
               const WireAllocator& wire) override;
  void allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count, int64_t step) override;
  void reduce_scatter(comm::Group& g, size_t bucket, float* grad, int64_t count, float* chunk_sum,
                      int64_t chunk, int64_t step) override;

  const ChunkEncoder& encoder() const { return *encoder_; }

 private:
  // Phases 1 and 2: leaves this rank's encoded chunk sum in its slot of recv_; returns the slot
  // size in bytes.
  size_t reduce_own_chunk(comm::Group& g, size_t bucket, const float* grad, int64_t count,
                          int64_t step);
  void check_call(const comm::Group& g, size_t bucket, int64_t count) const;
  void update_error_norm();

  std::string name_;
  std::unique_ptr<ChunkEncoder> encoder_;
  int ranks_ = 0;
  std::vector<int64_t> bucket_size_;
  std::vector<std::vector<float>> worker_memory_;  // per bucket: its floats
  std::vector<std::vector<float>> server_memory_;  // per bucket: this rank's chunk
  std::vector<double> memory_square_norm_;         // per bucket: both memories, as last encoded
  std::vector<float> chunk_sum_;                   // phase 1's sum of the N copies of my chunk
  std::byte* send_ = nullptr;                      // N slots (wire memory)
  std::byte* recv_ = nullptr;                      // N slots (wire memory)
};

}  // namespace braid::parallel
