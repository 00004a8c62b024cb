// Which library multiplies each GEMM shape, measured on the CPU the run is on (cuDNN's
// benchmark mode). Which of OpenBLAS and oneDNN is faster depends on the shape and on the
// CPU (on Zen 4 oneDNN runs the cnn's conv2 weight gradient at 101 GFLOP/s where OpenBLAS
// gives 74; on Zen 3 a rule measured there picked the other way), so no rule fixed at
// build time can be right everywhere.
//
// Under GemmPolicy::automatic the first product of each shape (transposes, M, N, K) times
// every candidate on the caller's own operands, into scratch memory, a few alternated
// rounds each after one untimed call (oneDNN generates its kernel on the first), keeps the
// fastest, and computes the caller's result with it; later products of the shape look the
// choice up (a shared lock, no allocation). The candidates are each library on the product
// as asked, and on its transpose (C^T = op(B)^T op(A)^T into scratch, then transposed into
// C): the libraries block M and N differently, so x W^T and W x^T of the same sizes can
// differ by 15 %. The other policies force one library, as asked.
//
// Reproducibility: a run's bits depend on its choices (two libraries sum in different
// orders). The table can be read out (gemm_choices) and set (set_gemm_choices): the trainer
// records it beside the run and in each checkpoint, a resumed run starts from its
// checkpoint's, and a recorded table replayed makes a second run bitwise the first.
//
// Thread-safe: ranks running as threads share one table (and so their choices).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/gemm.h"

namespace braid {

enum class GemmPolicy { automatic, openblas, onednn };

// "auto", "openblas", "onednn" (BRAID_GEMM's values); anything else is an error naming them.
GemmPolicy parse_gemm_policy(std::string_view text);
const char* gemm_policy_name(GemmPolicy policy);
void set_gemm_policy(GemmPolicy policy);
GemmPolicy gemm_policy();

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  auto operator<=>(const GemmShape&) const = default;
  std::string str() const;  // "128x512x784 NT"
};

// How a product is computed: which library, on the product as asked or on its transpose.
struct GemmMethod {
  GemmLibrary library = GemmLibrary::openblas;
  bool transposed = false;
  auto operator<=>(const GemmMethod&) const = default;
  std::string str() const;  // "onednn", "openblas transposed"
};

// C = alpha op(A) op(B) + beta C by `method` (row-major, explicit leading dimensions).
void sgemm_by(GemmMethod method, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
              float* C, int64_t ldc);

struct GemmChoice {
  GemmShape shape;
  GemmMethod method;
  // Best time of each candidate in seconds: openblas, onednn, then each on the transpose;
  // 0 when not measured here (set from a recorded table).
  double seconds[4] = {0, 0, 0, 0};
  const GemmShape& key() const { return shape; }
};

// How `shape` is multiplied now: the forced library, else the recorded or measured choice;
// nullopt under the automatic policy for a shape not seen yet.
std::optional<GemmMethod> chosen_gemm_method(const GemmShape& shape);

// Every choice so far, by shape.
std::vector<GemmChoice> gemm_choices();
// Fixes these shapes' libraries (a recorded table); shapes not listed are measured when
// first seen. Replaces earlier choices of the same shapes.
void set_gemm_choices(std::span<const GemmChoice> choices);
// Forgets every choice (tests and benchmarks).
void clear_gemm_choices();

// Called by sgemm under the automatic policy for a shape without a choice: measures the
// candidates on these operands, records the fastest and returns it. C is not written.
GemmMethod measure_gemm_choice(const GemmShape& shape, float alpha, const float* A, int64_t lda,
                               const float* B, int64_t ldb, float beta, const float* C,
                               int64_t ldc);

}  // namespace braid
