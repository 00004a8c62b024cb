// The top-k codec (Deep Gradient Compression); the algorithm and its terms are in
// codec_topk.h.
#include "parallel/codec_topk.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/error.h"

namespace braid::parallel {

namespace {

// DGC's first warm-up epoch keeps a quarter of the entries (75 % sparsity).
constexpr double kWarmupStartFraction = 0.25;

// |x| as an integer: for non-negative floats the bit patterns order like the values, and
// NaN lands above infinity, so this is a total order (nth_element needs one) that selects
// a NaN first.
uint32_t magnitude_bits(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }

// piece = [k indices][k values' bits] of the chosen entries of `memory`, which leave it (and
// `velocity`'s too when there is one: momentum-factor masking).
void pack_entries(float* memory, float* velocity, const int32_t* chosen, int64_t k,
                  int32_t* piece) {
  for (int64_t j = 0; j < k; ++j) {
    const int32_t i = chosen[j];
    piece[j] = i;
    piece[k + j] = std::bit_cast<int32_t>(memory[i]);  // NaN and inf too: the loss scaler's
    memory[i] = 0;
    if (velocity) velocity[i] = 0;
  }
}

// apply(i, value) for each of a piece's k entries, in order; an index outside [0, n) is an
// error, `sender` saying whose piece it was.
template <typename Apply>
void for_each_entry(const int32_t* piece, int64_t n, int64_t k, const std::string& sender,
                    Apply&& apply) {
  for (int64_t j = 0; j < k; ++j) {
    const int32_t i = piece[j];
    BRAID_CHECK(i >= 0 && i < n, "topk: ", sender, "'s entry ", j, " names float ", i,
                " of a piece of ", n, "; the sender cut its pieces differently");
    apply(i, std::bit_cast<float>(piece[k + j]));
  }
}

}  // namespace

double topk_kept_fraction(double ratio, int64_t warmup_steps, int64_t step) {
  if (step >= warmup_steps || ratio >= kWarmupStartFraction) return ratio;
  const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps);
  return std::pow(kWarmupStartFraction, 1.0 - progress) * std::pow(ratio, progress);
}

int64_t topk_count(int64_t count, double ratio, int64_t warmup_steps, int64_t step) {
  const double fraction = topk_kept_fraction(ratio, warmup_steps, step);
  const auto k = static_cast<int64_t>(std::llround(fraction * static_cast<double>(count)));
  return std::min(count, std::max<int64_t>(1, k));
}

void topk_largest(const float* v, int64_t n, int64_t k, int32_t* order) {
  int32_t* const first = order;
  int32_t* const last = order + n;
  std::iota(first, last, 0);
  if (k >= n) return;
  std::nth_element(first, first + k, last, [v](int32_t x, int32_t y) {
    const uint32_t mx = magnitude_bits(v[x]), my = magnitude_bits(v[y]);
    return mx != my ? mx > my : x < y;
  });
  std::sort(first, first + k);
}

TopkCodec::TopkCodec(const CodecConfig& config)
    : ratio_(config.topk_ratio),
      momentum_(config.topk_momentum),
      clip_norm_(config.clip_norm),
      warmup_steps_(config.warmup_steps) {
  BRAID_CHECK(ratio_ > 0 && ratio_ <= 1, "topk codec: topk_ratio must be in (0, 1], got ", ratio_,
              "; it is the fraction of each bucket sent (DGC uses 0.001)");
  BRAID_CHECK(momentum_ >= 0 && momentum_ < 1, "topk codec: topk_momentum must be in [0, 1), got ",
              momentum_, "; 0 turns momentum correction off");
  BRAID_CHECK(clip_norm_ >= 0, "topk codec: clip_norm must be >= 0 (0: no clipping), got ",
              clip_norm_);
  BRAID_CHECK(warmup_steps_ >= 0, "topk codec: warmup_steps must be >= 0 (0: no warm-up), got ",
              warmup_steps_);
}

void TopkCodec::prepare(const std::vector<BucketLayout>& buckets, int ranks,
                        const WireAllocator& wire) {
  BRAID_CHECK(ranks >= 1, "topk codec: prepare() for a group of ", ranks, " ranks");
  BRAID_CHECK(buckets_.empty(),
              "topk codec: prepare() was called twice; a codec object serves "
              "one strategy's buckets");
  ranks_ = ranks;
  int64_t largest = 0, largest_k = 0;
  for (const BucketLayout& layout : buckets) {
    const int64_t count = layout.size();
    BRAID_CHECK(count >= 0 && count <= std::numeric_limits<int32_t>::max(), "topk codec: bucket ",
                buckets_.size(), " holds ", count,
                " floats, more than int32 indices reach; use smaller buckets");
    Bucket& b = buckets_.emplace_back();
    b.residual.assign(static_cast<size_t>(count), 0.0f);
    if (momentum_ > 0) b.velocity.assign(static_cast<size_t>(count), 0.0f);
    largest = std::max(largest, count);
    // The warm-up only lowers k, so step 0 sends the most.
    largest_k = std::max(largest_k, topk_count(count, ratio_, warmup_steps_, 0));
  }
  order_.assign(static_cast<size_t>(largest), 0);
  gathered_words_ = int64_t{ranks} * 2 * largest_k;
  gathered_ = static_cast<int32_t*>(wire(static_cast<size_t>(gathered_words_) * sizeof(int32_t)));
}

std::span<const float> TopkCodec::residual(size_t bucket) const {
  BRAID_CHECK(bucket < buckets_.size(), "topk codec: no bucket ", bucket, " (", buckets_.size(),
              " prepared)");
  return buckets_[bucket].residual;
}

std::span<const float> TopkCodec::velocity(size_t bucket) const {
  BRAID_CHECK(bucket < buckets_.size(), "topk codec: no bucket ", bucket, " (", buckets_.size(),
              " prepared)");
  return buckets_[bucket].velocity;
}

// A non-finite norm is left alone: scaling by 0 would hide the overflow from the loss
// scaler, which must see it to skip the step.
void TopkCodec::clip(float* grad, int64_t count, int ranks) const {
  double norm2 = 0;
  for (int64_t i = 0; i < count; ++i) norm2 += static_cast<double>(grad[i]) * grad[i];
  const double norm = std::sqrt(norm2);
  const double limit = clip_norm_ / std::sqrt(static_cast<double>(ranks));
  if (!std::isfinite(norm) || norm <= limit) return;
  const auto scale = static_cast<float>(limit / norm);
  for (int64_t i = 0; i < count; ++i) grad[i] *= scale;
}

void TopkCodec::accumulate(Bucket& b, const float* grad, int64_t count) const {
  float* v = b.residual.data();
  if (momentum_ == 0) {
    for (int64_t i = 0; i < count; ++i) v[i] += grad[i];
    return;
  }
  float* u = b.velocity.data();
  for (int64_t i = 0; i < count; ++i) {
    u[i] = momentum_ * u[i] + grad[i];
    v[i] += u[i];
  }
}

// The k indices of largest |v|, ascending (so the wire and the decode walk memory in order).
const int32_t* TopkCodec::select(const Bucket& b, int64_t count, int64_t k) {
  topk_largest(b.residual.data(), count, k, order_.data());
  return order_.data();
}

void TopkCodec::pack_and_mask(Bucket& b, const int32_t* chosen, int64_t k, int32_t* piece) const {
  pack_entries(b.residual.data(), b.velocity.empty() ? nullptr : b.velocity.data(), chosen, k,
               piece);
}

void TopkCodec::scatter_add(const int32_t* gathered, int ranks, int64_t k, float* grad,
                            int64_t count) const {
  std::fill(grad, grad + count, 0.0f);
  for (int r = 0; r < ranks; ++r)
    for_each_entry(gathered + int64_t{r} * 2 * k, count, k, "rank " + std::to_string(r),
                   [grad](int32_t i, float v) { grad[i] += v; });
}

void TopkCodec::report(Bucket& b, int64_t count, int64_t k, int ranks) {
  report_.wire_bytes += static_cast<double>(ranks - 1) * static_cast<double>(k) * 8.0;
  report_.dense_bytes += dense_allreduce_bytes(count, ranks);
  double norm2 = 0;
  for (const float x : b.residual) norm2 += static_cast<double>(x) * x;
  b.residual_norm2 = norm2;
  double total = 0;
  for (const Bucket& each : buckets_) total += each.residual_norm2;
  report_.error_norm = std::sqrt(total);
}

void TopkCodec::allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count, int64_t step) {
  BRAID_CHECK(bucket < buckets_.size(), "topk codec: bucket ", bucket, " was not prepared (",
              buckets_.size(), " buckets); call prepare() with every bucket first");
  Bucket& b = buckets_[bucket];
  BRAID_CHECK(count == static_cast<int64_t>(b.residual.size()), "topk codec: bucket ", bucket,
              " has ", count, " floats but was prepared with ", b.residual.size());
  BRAID_CHECK(g.size() == ranks_, "topk codec: prepared for ", ranks_,
              " ranks, called with a group of ", g.size());
  if (count == 0) return;
  const int n = g.size();
  const int64_t k = topk_count(count, ratio_, warmup_steps_, step);
  BRAID_CHECK(int64_t{n} * 2 * k <= gathered_words_, "topk codec: step ", step, " sends ", k,
              " entries of bucket ", bucket, ", more than prepare() sized for");

  if (clip_norm_ > 0) clip(grad, count, n);
  accumulate(b, grad, count);
  int32_t* piece = gathered_ + int64_t{g.rank()} * 2 * k;
  pack_and_mask(b, select(b, count, k), k, piece);
  comm::allgather(g, piece, gathered_, static_cast<size_t>(2 * k), DType::i32);
  scatter_add(gathered_, n, k, grad, count);
  report(b, count, k, n);
}

TopkEncoder::TopkEncoder(double ratio) : ratio_(ratio) {
  BRAID_CHECK(ratio_ > 0 && ratio_ <= 1, "topk encoder: topk_ratio must be in (0, 1], got ", ratio_,
              "; it is the fraction of each push sent");
}

size_t TopkEncoder::encoded_bytes(int64_t floats) const {
  return static_cast<size_t>(kept(floats)) * 8;
}

double TopkEncoder::encode(const float* in, float* memory, int64_t n, std::byte* out,
                           const EncodeSite& /*site*/) const {
  for (int64_t i = 0; i < n; ++i) memory[i] += in[i];
  const int64_t k = kept(n);
  thread_local std::vector<int32_t> order;  // one per thread, reused across pushes
  if (static_cast<int64_t>(order.size()) < n) order.resize(static_cast<size_t>(n));
  topk_largest(memory, n, k, order.data());
  pack_entries(memory, nullptr, order.data(), k, reinterpret_cast<int32_t*>(out));
  double lost = 0;
  for (int64_t i = 0; i < n; ++i) lost += static_cast<double>(memory[i]) * memory[i];
  return lost;
}

// Assigned, not added to zeros: a push of every float is the fp32 push bit for bit (but
// for a -0.0 gradient, which the memory's +0.0 turned into +0.0 before it was sent).
void TopkEncoder::decode(const std::byte* in, int64_t n, float* out) const {
  std::fill(out, out + n, 0.0f);
  for_each_entry(reinterpret_cast<const int32_t*>(in), n, kept(n), "a push",
                 [out](int32_t i, float v) { out[i] = v; });
}

void TopkEncoder::decode_add(const std::byte* in, int64_t n, float* sum) const {
  for_each_entry(reinterpret_cast<const int32_t*>(in), n, kept(n), "a push",
                 [sum](int32_t i, float v) { sum[i] += v; });
}

}  // namespace braid::parallel
