// PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
// Compression for Distributed Optimization", NeurIPS 2019), with the knobs of PyTorch's
// ddp_comm_hooks.powerSGD_hook: rank r, start_powerSGD_iter, min_compression_rate, warm
// start and error feedback always on.
//
// How a bucket crosses the wire, once step >= start_iter:
//  - Vectors, matrices whose rate rows cols / ((rows + cols) r) is not above
//    min_compression_rate, and alignment gaps are "plain": packed together and summed in
//    one fp32 allreduce. Before start_iter the whole bucket is plain (no error feedback).
//  - Every other matrix M_i (rank i's gradient, rows x cols row-major, r clamped to
//    min(rows, cols)) gets its error memory added: M_i += e_i. Then one step of subspace
//    (power) iteration, warm-started from last step's Q (cols x r; the first one is drawn
//    from a seeded RNG and orthonormalised, the same on every rank):
//      P = sum_i M_i Q           (one allreduce for all the bucket's P's)
//      P := orthonormal columns  (modified Gram-Schmidt, as PyTorch's _orthogonalize)
//      Q_i = M_i^T P,  Q = sum_i Q_i   (one allreduce for all the Q's)
//      output = P Q^T = sum_i P P^T M_i
//  - The next step's warm start is this Q (PyTorch keeps Q / N: the scale of Q only
//    scales P before it is orthonormalised).
//
// Error feedback under the sum contract: the output is the sum over ranks of
// d_i = P P^T M_i = P Q_i^T, rank i's projection of its own matrix, so d_i is rank i's
// decoded contribution and e_i := M_i - P Q_i^T is what it lost (computed before Q is
// summed, from the local Q_i). Per rank and per step, d_i(t) + e_i(t) = g_i(t) + e_i(t-1),
// so sum_t d_i(t) = sum_t g_i(t) - e_i(T): the decoded sum tracks the true sum within the
// last error, whatever T. PyTorch instead keeps e_i = M_i - (1/N) sum_j P P^T M_j, which
// has the same sum over ranks but does not telescope rank by rank.
//
// Orthogonalisation: modified Gram-Schmidt on P's columns, as PyTorch's _orthogonalize,
// but run twice: for a gradient of rank below r some columns of P are rounding noise, and
// one pass leaves them far from orthogonal to the others (P P^T would be no projection,
// and even full rank would not give the sum back); two passes make them orthogonal to
// working precision. PyTorch guards a zero column (a frozen layer's zero gradient) by
// dividing by norm + epsilon, which would also shrink every small column and spoil
// full-rank exactness for small gradients; here a column below kZeroColumn is set to zero
// (its direction stays in the error memory).
//
// Agreement: P and Q are summed by allreduce (the same bits everywhere), Gram-Schmidt and
// the output product P Q^T are fixed-order loops (no GEMM library whose choice may differ
// between processes), so every rank ends with the same bits. The rank-local products
// (M Q, M^T P, the error) use braid's GEMM.
//
// State, sized in prepare(): per bucket, the packed plain floats, all P's and all Q's (in
// wire memory) and the error memory of its compressed matrices.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/codec.h"

namespace braid::parallel {

class PowerSgdCodec : public GradientCodec {
 public:
  // Throws braid::Error for a rank below 1 or a negative start_iter.
  explicit PowerSgdCodec(const CodecConfig& config);

  std::string_view name() const override { return "powersgd"; }
  void prepare(const std::vector<BucketLayout>& buckets, int ranks,
               const WireAllocator& wire) override;
  void allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count, int64_t step) override;

  // A column of P whose residual norm is at most this has no direction: it becomes zero
  // (its inverse norm would overflow a float).
  static constexpr double kZeroColumn = 1.1754943508222875e-38;  // FLT_MIN

 private:
  struct CompressedMatrix {
    int64_t offset = 0;  // floats from the bucket's first
    int64_t rows = 0, cols = 0, rank = 0;
    float* p = nullptr;      // rows x r, in the bucket's P block
    float* q = nullptr;      // cols x r, in the bucket's Q block; the warm start between steps
    float* error = nullptr;  // rows x cols, in the bucket's error memory
  };
  struct Range {
    int64_t offset = 0, size = 0;
  };
  struct Bucket {
    int64_t size = 0;
    std::vector<CompressedMatrix> matrices;
    std::vector<Range> plain;  // everything that is not a compressed matrix, gaps included
    int64_t plain_floats = 0, p_floats = 0, q_floats = 0;
    float* plain_pack = nullptr;
    float* p_block = nullptr;
    float* q_block = nullptr;
    std::vector<float> error;
    double error_sq = 0;  // |error|^2 as of the last step
  };

  Bucket layout_bucket(const BucketLayout& layout) const;
  bool compresses(int64_t rows, int64_t cols, int64_t rank) const;
  void place_in_memory(Bucket& b, float*& wire) const;
  void initialise_q(Bucket& b, size_t bucket_index) const;

  void allreduce_plain(comm::Group& g, Bucket& b, float* grad);
  void compress(comm::Group& g, Bucket& b, float* grad);
  void set_error_norm();

  int rank_;
  int64_t start_iter_;
  double min_compression_rate_;
  uint64_t seed_;
  std::vector<Bucket> buckets_;
  std::vector<float> q_transposed_;  // Q^T of the matrix being decoded (the widest Q's size)
};

// Orthonormalises the r columns of the row-major rows x r matrix `m` in place (modified
// Gram-Schmidt, two passes); a column with no residual (kZeroColumn) becomes zero.
void orthonormalise_columns(float* m, int64_t rows, int64_t r);

}  // namespace braid::parallel
