#include "parallel/codec_cast.h"

#include <algorithm>

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

}  // namespace braid::parallel
