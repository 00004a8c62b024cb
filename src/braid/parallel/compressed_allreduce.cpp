#include "parallel/compressed_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "comm/collectives.h"
#include "core/error.h"

namespace braid::parallel {
namespace {

int64_t chunk_floats(int64_t count, int ranks) { return (count + ranks - 1) / ranks; }

// Floats of chunk c: C, fewer for the last ones, 0 past the end.
int64_t chunk_length(int64_t count, int64_t chunk, int c) {
  return std::clamp<int64_t>(count - c * chunk, 0, chunk);
}

}  // namespace

CompressedAllreduce::CompressedAllreduce(std::string name, std::unique_ptr<ChunkEncoder> encoder)
    : name_(std::move(name)), encoder_(std::move(encoder)) {
  BRAID_CHECK(encoder_ != nullptr, "codec ", name_, ": no chunk encoder was given");
}

void CompressedAllreduce::prepare(const std::vector<BucketLayout>& buckets, int ranks,
                                  const WireAllocator& wire) {
  BRAID_CHECK(ranks >= 1, "codec ", name_, ": prepare() for a group of ", ranks, " ranks");
  ranks_ = ranks;
  size_t largest_slot = 0;
  int64_t largest_chunk = 0;
  for (const BucketLayout& b : buckets) {
    const int64_t chunk = chunk_floats(b.size(), ranks);
    bucket_size_.push_back(b.size());
    worker_memory_.emplace_back(static_cast<size_t>(b.size()), 0.0f);
    server_memory_.emplace_back(static_cast<size_t>(chunk), 0.0f);
    memory_square_norm_.push_back(0);
    largest_slot = std::max(largest_slot, encoder_->encoded_bytes(chunk));
    largest_chunk = std::max(largest_chunk, chunk);
  }
  chunk_sum_.assign(static_cast<size_t>(largest_chunk), 0.0f);
  // One pair of slot arrays serves every bucket: buckets run one at a time, and a collective
  // returns only once its buffers may be reused.
  const size_t slots = largest_slot * static_cast<size_t>(ranks);
  if (slots == 0) return;
  send_ = static_cast<std::byte*>(wire(2 * slots));
  recv_ = send_ + slots;
}

void CompressedAllreduce::check_call(const comm::Group& g, size_t bucket, int64_t count) const {
  BRAID_CHECK(g.size() == ranks_, "codec ", name_, ": prepared for ", ranks_,
              " ranks but called on a group of ", g.size(), "; prepare() with the group's size");
  BRAID_CHECK(bucket < bucket_size_.size(), "codec ", name_, ": bucket ", bucket,
              " was not among the ", bucket_size_.size(), " buckets given to prepare()");
  BRAID_CHECK(count >= 0 && count <= bucket_size_[bucket], "codec ", name_, ": bucket ", bucket,
              " called with ", count, " floats but prepared for ", bucket_size_[bucket]);
}

size_t CompressedAllreduce::reduce_own_chunk(comm::Group& g, size_t bucket, const float* grad,
                                             int64_t count, int64_t step) {
  const int n = g.size(), me = g.rank();
  const int64_t chunk = chunk_floats(count, n);
  const size_t slot = encoder_->encoded_bytes(chunk);
  float* memory = worker_memory_[bucket].data();
  double square_norm = 0;
  for (int c = 0; c < n; ++c) {
    const int64_t len = chunk_length(count, chunk, c), first = c * chunk;
    std::byte* out = send_ + static_cast<size_t>(c) * slot;
    const size_t used = encoder_->encoded_bytes(len);
    square_norm += encoder_->encode(grad + first, memory + first, len, out,
                                    {step, EncodeSite::Stage::worker, me, bucket, first});
    std::memset(out + used, 0, slot - used);  // the short chunks' padding, sent as zeros
  }
  comm::alltoall(g, send_, recv_, slot / 4, DType::i32);

  const int64_t mine = chunk_length(count, chunk, me), first = me * chunk;
  float* sum = chunk_sum_.data();
  std::fill(sum, sum + mine, 0.0f);
  for (int r = 0; r < n; ++r)
    encoder_->decode_add(recv_ + static_cast<size_t>(r) * slot, mine, sum);
  std::byte* own = recv_ + static_cast<size_t>(me) * slot;
  const size_t used = encoder_->encoded_bytes(mine);
  square_norm += encoder_->encode(sum, server_memory_[bucket].data(), mine, own,
                                  {step, EncodeSite::Stage::server, me, bucket, first});
  std::memset(own + used, 0, slot - used);
  memory_square_norm_[bucket] = square_norm;
  update_error_norm();
  return slot;
}

void CompressedAllreduce::allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count,
                                    int64_t step) {
  check_call(g, bucket, count);
  const int n = g.size();
  report_.dense_bytes += dense_allreduce_bytes(count, n);
  if (count == 0) return;
  const size_t slot = reduce_own_chunk(g, bucket, grad, count, step);
  std::byte* own = recv_ + static_cast<size_t>(g.rank()) * slot;
  comm::allgather(g, own, recv_, slot / 4, DType::i32);
  report_.wire_bytes += 2.0 * (n - 1) * static_cast<double>(slot);

  const int64_t chunk = chunk_floats(count, n);
  for (int c = 0; c < n; ++c)
    encoder_->decode(recv_ + static_cast<size_t>(c) * slot, chunk_length(count, chunk, c),
                     grad + c * chunk);
}

void CompressedAllreduce::reduce_scatter(comm::Group& g, size_t bucket, float* grad, int64_t count,
                                         float* chunk_sum, int64_t chunk, int64_t step) {
  check_call(g, bucket, count);
  const int n = g.size();
  if (count == 0 || chunk != chunk_floats(count, n)) {
    GradientCodec::reduce_scatter(g, bucket, grad, count, chunk_sum, chunk, step);
    return;
  }
  report_.dense_bytes += static_cast<double>(chunk) * (n - 1) * sizeof(float);
  const size_t slot = reduce_own_chunk(g, bucket, grad, count, step);
  report_.wire_bytes += static_cast<double>(n - 1) * static_cast<double>(slot);
  const int64_t mine = chunk_length(count, chunk, g.rank());
  encoder_->decode(recv_ + static_cast<size_t>(g.rank()) * slot, mine, chunk_sum);
  std::fill(chunk_sum + mine, chunk_sum + chunk, 0.0f);
}

void CompressedAllreduce::update_error_norm() {
  double total = 0;
  for (const double s : memory_square_norm_) total += s;
  report_.error_norm = std::sqrt(total);
}

}  // namespace braid::parallel
