#include "parallel/codec_powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/collectives.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/multiversion.h"
#include "core/rng.h"

namespace braid::parallel {

namespace {

// The RNG stream of the first Q's, apart from any other use of the seed.
constexpr uint64_t kInitialQStream = 0x9057'5CDull;

// out (rows x cols) := P Q^T, from P (rows x r) and Qt = Q^T (r x cols): each element's
// sum over k in ascending order, vectorised along the row, so every rank (same inputs,
// same clone) gets the same bits. The scalar loop it replaced, r products per element
// gathered at a stride of r, took longer than the three GEMMs together.
BRAID_MULTIVERSION void low_rank_product(const float* __restrict p, const float* __restrict qt,
                                         float* __restrict out, int64_t rows, int64_t cols,
                                         int64_t r) {
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * cols;
    const float* pi = p + i * r;
    const float p0 = pi[0];
    for (int64_t j = 0; j < cols; ++j) o[j] = p0 * qt[j];
    for (int64_t k = 1; k < r; ++k) {
      const float pk = pi[k];
      const float* q = qt + k * cols;
      for (int64_t j = 0; j < cols; ++j) o[j] += pk * q[j];
    }
  }
}

double column_dot(const float* m, int64_t rows, int64_t r, int64_t a, int64_t b) {
  double sum = 0;
  for (int64_t i = 0; i < rows; ++i)
    sum += static_cast<double>(m[i * r + a]) * static_cast<double>(m[i * r + b]);
  return sum;
}

void scale_column(float* m, int64_t rows, int64_t r, int64_t c, double scale) {
  for (int64_t i = 0; i < rows; ++i)
    m[i * r + c] = static_cast<float>(static_cast<double>(m[i * r + c]) * scale);
}

// Column `to` -= coefficient x column `from`.
void subtract_column(float* m, int64_t rows, int64_t r, int64_t from, int64_t to,
                     double coefficient) {
  for (int64_t i = 0; i < rows; ++i)
    m[i * r + to] = static_cast<float>(static_cast<double>(m[i * r + to]) -
                                       coefficient * static_cast<double>(m[i * r + from]));
}

void allreduce_sum(comm::Group& g, float* data, int64_t floats) {
  comm::allreduce(g, data, static_cast<size_t>(floats), DType::f32, ReduceOp::sum);
}

}  // namespace

void orthonormalise_columns(float* m, int64_t rows, int64_t r) {
  for (int64_t c = 0; c < r; ++c) {
    // Modified Gram-Schmidt, twice ("twice is enough", Parlett): one pass leaves a column
    // whose residual is mostly rounding noise (a gradient of rank below r) far from
    // orthogonal to the earlier ones; the second pass makes it orthogonal to working
    // precision, so P P^T stays a projection.
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t earlier = 0; earlier < c; ++earlier)
        subtract_column(m, rows, r, earlier, c, column_dot(m, rows, r, earlier, c));
    const double residual = std::sqrt(column_dot(m, rows, r, c, c));
    const bool zero = residual <= PowerSgdCodec::kZeroColumn;
    scale_column(m, rows, r, c, zero ? 0.0 : 1.0 / residual);
  }
}

PowerSgdCodec::PowerSgdCodec(const CodecConfig& config)
    : rank_(config.powersgd_rank),
      start_iter_(config.start_iter),
      min_compression_rate_(config.min_compression_rate),
      seed_(config.seed) {
  BRAID_CHECK(rank_ >= 1, "powersgd: the rank of the factors must be at least 1, got ", rank_);
  BRAID_CHECK(start_iter_ >= 0, "powersgd: start_iter must not be negative, got ", start_iter_);
}

// PyTorch's _should_compress: worth it only when the factors are smaller than the matrix
// by more than the minimum rate.
bool PowerSgdCodec::compresses(int64_t rows, int64_t cols, int64_t rank) const {
  if (cols <= 1) return false;  // a vector
  const double dense = static_cast<double>(rows) * static_cast<double>(cols);
  const double factors = static_cast<double>(rows + cols) * static_cast<double>(rank);
  return factors * min_compression_rate_ < dense;
}

PowerSgdCodec::Bucket PowerSgdCodec::layout_bucket(const BucketLayout& layout) const {
  Bucket b;
  b.size = layout.size();
  BRAID_CHECK(b.size >= 0, "powersgd: bucket [", layout.begin, ", ", layout.end,
              ") is not a range");
  int64_t covered = 0;  // floats before this one are assigned: compressed or plain
  auto add_plain = [&](int64_t until) {
    if (until > covered) b.plain.push_back({covered, until - covered});
    covered = std::max(covered, until);
  };
  for (const CodecTensor& t : layout.tensors) {
    BRAID_CHECK(
        t.rows >= 1 && t.cols >= 1 && t.offset >= covered && t.offset + t.rows * t.cols <= b.size,
        "powersgd: tensor at ", t.offset, " (", t.rows, " x ", t.cols,
        ") is outside its bucket of ", b.size, " floats or overlaps the one before");
    const int64_t rank = std::min<int64_t>({rank_, t.rows, t.cols});
    if (!compresses(t.rows, t.cols, rank)) continue;  // stays in the plain ranges
    add_plain(t.offset);
    b.matrices.push_back({t.offset, t.rows, t.cols, rank});
    covered = t.offset + t.rows * t.cols;
  }
  add_plain(b.size);
  for (const Range& range : b.plain) b.plain_floats += range.size;
  for (const CompressedMatrix& m : b.matrices) {
    b.p_floats += m.rows * m.rank;
    b.q_floats += m.cols * m.rank;
  }
  return b;
}

void PowerSgdCodec::place_in_memory(Bucket& b, float*& wire) const {
  if (b.matrices.empty()) return;  // plain buckets are summed in place
  b.plain_pack = wire;
  wire += b.plain_floats;
  b.p_block = wire;
  wire += b.p_floats;
  b.q_block = wire;
  wire += b.q_floats;
  int64_t p_at = 0, q_at = 0, error_floats = 0;
  for (const CompressedMatrix& m : b.matrices) error_floats += m.rows * m.cols;
  b.error.assign(static_cast<size_t>(error_floats), 0.0f);
  int64_t error_at = 0;
  for (CompressedMatrix& m : b.matrices) {
    m.p = b.p_block + p_at;
    m.q = b.q_block + q_at;
    m.error = b.error.data() + error_at;
    p_at += m.rows * m.rank;
    q_at += m.cols * m.rank;
    error_at += m.rows * m.cols;
  }
}

// The first warm start: Gaussian, orthonormalised (PyTorch), from the seed alone so every
// rank draws the same.
void PowerSgdCodec::initialise_q(Bucket& b, size_t bucket_index) const {
  const Rng bucket_rng = Rng(seed_, kInitialQStream).fork(bucket_index);
  for (size_t i = 0; i < b.matrices.size(); ++i) {
    CompressedMatrix& m = b.matrices[i];
    Rng rng = bucket_rng.fork(i);
    for (int64_t k = 0; k < m.cols * m.rank; ++k) m.q[k] = rng.normal();
    orthonormalise_columns(m.q, m.cols, m.rank);
  }
}

void PowerSgdCodec::prepare(const std::vector<BucketLayout>& buckets, int ranks,
                            const WireAllocator& wire) {
  BRAID_CHECK(ranks >= 1, "powersgd: a group of ", ranks, " ranks");
  buckets_.clear();
  int64_t wire_floats = 0;
  for (const BucketLayout& layout : buckets) {
    buckets_.push_back(layout_bucket(layout));
    const Bucket& b = buckets_.back();
    if (!b.matrices.empty()) wire_floats += b.plain_floats + b.p_floats + b.q_floats;
  }
  if (wire_floats == 0) return;
  int64_t widest_q = 0;
  for (const Bucket& b : buckets_)
    for (const CompressedMatrix& m : b.matrices) widest_q = std::max(widest_q, m.cols * m.rank);
  q_transposed_.assign(static_cast<size_t>(widest_q), 0.0f);
  auto* memory = static_cast<float*>(wire(static_cast<size_t>(wire_floats) * sizeof(float)));
  for (size_t i = 0; i < buckets_.size(); ++i) {
    place_in_memory(buckets_[i], memory);
    initialise_q(buckets_[i], i);
  }
}

void PowerSgdCodec::allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count,
                              int64_t step) {
  BRAID_CHECK(bucket < buckets_.size(), "powersgd: bucket ", bucket, " of ", buckets_.size(),
              " prepared");
  Bucket& b = buckets_[bucket];
  BRAID_CHECK_EQ(count, b.size, "powersgd: bucket ", bucket, "'s float count");
  report_.dense_bytes += dense_allreduce_bytes(count, g.size());
  if (step < start_iter_ || b.matrices.empty()) {
    report_.wire_bytes += dense_allreduce_bytes(count, g.size());
    allreduce_sum(g, grad, count);
  } else {
    allreduce_plain(g, b, grad);
    compress(g, b, grad);
  }
  set_error_norm();
}

void PowerSgdCodec::allreduce_plain(comm::Group& g, Bucket& b, float* grad) {
  if (b.plain_floats == 0) return;
  float* pack = b.plain_pack;
  for (const Range& range : b.plain) {
    std::memcpy(pack, grad + range.offset, static_cast<size_t>(range.size) * sizeof(float));
    pack += range.size;
  }
  report_.wire_bytes += dense_allreduce_bytes(b.plain_floats, g.size());
  allreduce_sum(g, b.plain_pack, b.plain_floats);
  pack = b.plain_pack;
  for (const Range& range : b.plain) {
    std::memcpy(grad + range.offset, pack, static_cast<size_t>(range.size) * sizeof(float));
    pack += range.size;
  }
}

void PowerSgdCodec::compress(comm::Group& g, Bucket& b, float* grad) {
  for (CompressedMatrix& m : b.matrices) {
    float* matrix = grad + m.offset;
    for (int64_t k = 0; k < m.rows * m.cols; ++k) matrix[k] += m.error[k];
    sgemm(false, false, m.rows, m.rank, m.cols, 1.0f, matrix, m.q, 0.0f, m.p, m.cols, m.rank,
          m.rank);
  }
  report_.wire_bytes += dense_allreduce_bytes(b.p_floats, g.size());
  allreduce_sum(g, b.p_block, b.p_floats);

  b.error_sq = 0;
  for (CompressedMatrix& m : b.matrices) {
    const float* matrix = grad + m.offset;
    orthonormalise_columns(m.p, m.rows, m.rank);
    // Q_i = M_i^T P, then e_i = M_i - P Q_i^T: this rank's own loss, before Q is summed.
    sgemm(true, false, m.cols, m.rank, m.rows, 1.0f, matrix, m.p, 0.0f, m.q, m.cols, m.rank,
          m.rank);
    std::memcpy(m.error, matrix, static_cast<size_t>(m.rows * m.cols) * sizeof(float));
    sgemm(false, true, m.rows, m.cols, m.rank, -1.0f, m.p, m.q, 1.0f, m.error, m.rank, m.rank,
          m.cols);
    for (int64_t k = 0; k < m.rows * m.cols; ++k)
      b.error_sq += static_cast<double>(m.error[k]) * m.error[k];
  }
  report_.wire_bytes += dense_allreduce_bytes(b.q_floats, g.size());
  allreduce_sum(g, b.q_block, b.q_floats);

  // output = P Q^T.
  for (const CompressedMatrix& m : b.matrices) {
    for (int64_t j = 0; j < m.cols; ++j)
      for (int64_t k = 0; k < m.rank; ++k) q_transposed_[k * m.cols + j] = m.q[j * m.rank + k];
    low_rank_product(m.p, q_transposed_.data(), grad + m.offset, m.rows, m.cols, m.rank);
  }
}

void PowerSgdCodec::set_error_norm() {
  double sq = 0;
  for (const Bucket& b : buckets_) sq += b.error_sq;
  report_.error_norm = std::sqrt(sq);
}

}  // namespace braid::parallel
