#include "parallel/codec_cast.h"

#include <algorithm>
#include <cmath>

#include "comm/collectives.h"
#include "core/convert.h"
#include "core/error.h"

namespace braid::parallel {

CastCodec::CastCodec(DType wire) : wire_(wire) {
  BRAID_CHECK(wire == DType::f32 || wire == DType::bf16 || wire == DType::f16,
              "cast codec: the wire type must be fp32, bf16 or fp16, got ", dtype_name(wire));
}

std::string_view CastCodec::name() const {
  return wire_ == DType::f32 ? "none" : wire_ == DType::bf16 ? "bf16" : "fp16";
}

void CastCodec::prepare(const std::vector<BucketLayout>& buckets, int ranks,
                        const WireAllocator& wire) {
  if (wire_ == DType::f32) return;
  int64_t total = 0, largest_chunk = 0;
  for (const BucketLayout& b : buckets) {
    const int64_t chunk = (b.size() + ranks - 1) / ranks;
    total += chunk * ranks;
    largest_chunk = std::max(largest_chunk, chunk);
  }
  auto* memory = static_cast<uint16_t*>(wire(static_cast<size_t>(total) * sizeof(uint16_t)));
  for (const BucketLayout& b : buckets) {
    bucket_wire_.push_back(memory);
    memory += (b.size() + ranks - 1) / ranks * ranks;
  }
  chunk_out_.assign(static_cast<size_t>(largest_chunk), 0);
}

void CastCodec::narrow(const float* in, uint16_t* out, int64_t n) const {
  if (wire_ == DType::bf16)
    f32_to_bf16(in, reinterpret_cast<BFloat16*>(out), n);
  else
    f32_to_f16(in, reinterpret_cast<Half*>(out), n);
}

void CastCodec::widen(const uint16_t* in, float* out, int64_t n) const {
  if (wire_ == DType::bf16)
    bf16_to_f32(reinterpret_cast<const BFloat16*>(in), out, n);
  else
    f16_to_f32(reinterpret_cast<const Half*>(in), out, n);
}

void CastCodec::allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count,
                          int64_t /*step*/) {
  const double dense = dense_allreduce_bytes(count, g.size());
  report_.dense_bytes += dense;
  if (wire_ == DType::f32) {
    report_.wire_bytes += dense;
    comm::allreduce(g, grad, static_cast<size_t>(count), DType::f32, ReduceOp::sum);
    return;
  }
  report_.wire_bytes += dense / 2;
  uint16_t* wire = bucket_wire_[bucket];
  narrow(grad, wire, count);
  comm::allreduce(g, wire, static_cast<size_t>(count), wire_, ReduceOp::sum);
  widen(wire, grad, count);
}

void CastCodec::reduce_scatter(comm::Group& g, size_t bucket, float* grad, int64_t /*count*/,
                               float* chunk_sum, int64_t chunk, int64_t /*step*/) {
  const int n = g.size();
  const double dense = static_cast<double>(chunk) * (n - 1) * sizeof(float);
  report_.dense_bytes += dense;
  if (wire_ == DType::f32) {
    report_.wire_bytes += dense;
    comm::reduce_scatter(g, grad, chunk_sum, static_cast<size_t>(chunk), DType::f32, ReduceOp::sum);
    return;
  }
  report_.wire_bytes += dense / 2;
  uint16_t* wire = bucket_wire_[bucket];
  narrow(grad, wire, chunk * n);
  comm::reduce_scatter(g, wire, chunk_out_.data(), static_cast<size_t>(chunk), wire_,
                       ReduceOp::sum);
  widen(chunk_out_.data(), chunk_sum, chunk);
}

CastEncoder::CastEncoder(DType wire) : wire_(wire) {
  BRAID_CHECK(wire == DType::bf16 || wire == DType::f16,
              "cast encoder: the wire type must be bf16 or fp16, got ", dtype_name(wire));
}

size_t CastEncoder::encoded_bytes(int64_t floats) const {
  return static_cast<size_t>((floats + 1) / 2 * 4);
}

double CastEncoder::encode(const float* in, float* memory, int64_t n, std::byte* out,
                           const EncodeSite& /*site*/) const {
  constexpr int64_t kPiece = 256;  // rounded and widened back through a stack buffer
  float back[kPiece];
  double lost = 0;
  if (n % 2 != 0) std::fill_n(out + 2 * n, 2, std::byte{0});  // the word's padding
  for (int64_t lo = 0; lo < n; lo += kPiece) {
    const int64_t m = std::min(kPiece, n - lo);
    float* x = memory + lo;
    for (int64_t i = 0; i < m; ++i) x[i] += in[lo + i];
    auto* wire = reinterpret_cast<uint16_t*>(out) + lo;
    if (wire_ == DType::bf16) {
      f32_to_bf16(x, reinterpret_cast<BFloat16*>(wire), m);
      bf16_to_f32(reinterpret_cast<const BFloat16*>(wire), back, m);
    } else {
      f32_to_f16(x, reinterpret_cast<Half*>(wire), m);
      f16_to_f32(reinterpret_cast<const Half*>(wire), back, m);
    }
    for (int64_t i = 0; i < m; ++i) {
      x[i] = std::isfinite(back[i]) ? x[i] - back[i] : 0.0f;
      lost += static_cast<double>(x[i]) * x[i];
    }
  }
  return lost;
}

void CastEncoder::decode(const std::byte* in, int64_t n, float* out) const {
  const auto* wire = reinterpret_cast<const uint16_t*>(in);
  if (wire_ == DType::bf16)
    bf16_to_f32(reinterpret_cast<const BFloat16*>(wire), out, n);
  else
    f16_to_f32(reinterpret_cast<const Half*>(wire), out, n);
}

void CastEncoder::decode_add(const std::byte* in, int64_t n, float* sum) const {
  constexpr int64_t kPiece = 256;
  float piece[kPiece];
  for (int64_t lo = 0; lo < n; lo += kPiece) {
    const int64_t m = std::min(kPiece, n - lo);
    decode(in + 2 * lo, m, piece);
    for (int64_t i = 0; i < m; ++i) sum[lo + i] += piece[i];
  }
}

}  // namespace braid::parallel
