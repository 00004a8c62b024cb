// Which library multiplies each GEMM shape, measured on the CPU the run is on (cuDNN's
// benchmark mode). Which of OpenBLAS and oneDNN is faster depends on the shape and on the
// CPU (on Zen 4 oneDNN runs the cnn's conv2 weight gradient at 101 GFLOP/s where OpenBLAS
// gives 74; on Zen 3 a rule measured there picked the other way), so no rule fixed at
// build time can be right everywhere.
//
// Under GemmPolicy::automatic the first product of a shape (transposes, M, N, K) without a
// choice is decided by the process's OnMiss (core/choice_table.h):
//  - measure (a process alone): every candidate is timed on the caller's own operands, into
//    scratch memory, a few alternated rounds each after one untimed call (oneDNN generates
//    its kernel on the first); the fastest is kept and computes the caller's result.
//  - rule (deterministic mode): gemm_rule(), oneDNN on the product as asked, nothing timed.
//    Timed on Zen 4 over 40 products of the mlp, cnn and gpt-tiny, it was the fastest of the
//    four candidates for 24 and beat OpenBLAS as asked for 29; summed over a step it is
//    within 5 % of the best choices for the mlp and the cnn, 16 % for gpt-tiny. What
//    matters more is that it is the same in every process.
//  - rule_and_measure (several ranks): the rule computes, so every rank multiplies alike,
//    and the candidates are timed as under measure for the kernel cache
//    (train/kernel_cache.h), whose table the next job starts from.
// Later products of the shape look the choice up (a shared lock, no allocation). The
// candidates are each library on the product as asked, and on its transpose (C^T =
// op(B)^T op(A)^T into scratch, then transposed into C): the libraries block M and N
// differently, so x W^T and W x^T of the same sizes can differ by 15 %. The other
// policies force one library, as asked.
//
// Reproducibility: a run's bits depend on its choices (two libraries sum in different
// orders). The table can be read out (gemm_choices) and set (set_gemm_choices): the trainer
// starts every rank of a job from rank 0's table (train/job_kernels.h), records it beside
// the run and in each checkpoint, a resumed run starts from its checkpoint's, and a
// recorded table replayed makes a second run bitwise the first.
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

#include "core/choice_table.h"
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
  ChoiceOrigin origin = ChoiceOrigin::given;
  const GemmShape& key() const { return shape; }
};

// The fixed rule: how `shape` is multiplied when nothing is timed (OnMiss::rule).
GemmMethod gemm_rule(const GemmShape& shape);

// How `shape` is multiplied now: the forced library, else the table's choice; nullopt
// under the automatic policy for a shape not seen yet.
std::optional<GemmMethod> chosen_gemm_method(const GemmShape& shape);

// Every choice in use so far, by shape.
std::vector<GemmChoice> gemm_choices();
// Every shape timed in this process (under measure or rule_and_measure), by shape.
std::vector<GemmChoice> gemm_measurements();
// Fixes these shapes' methods (a recorded table); shapes not listed are decided when
// first seen. Replaces earlier choices of the same shapes.
void set_gemm_choices(std::span<const GemmChoice> choices);
// The same for shapes without a choice yet; a choice in use stays (the kernel cache).
void add_gemm_choices(std::span<const GemmChoice> choices);
// Forgets every choice and measurement (tests and benchmarks).
void clear_gemm_choices();

// Called by sgemm under the automatic policy for a shape without a choice: decides it by
// on_miss() (timing the candidates on these operands, or the rule), records and returns
// it. C is not written.
GemmMethod choose_gemm_method(const GemmShape& shape, float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, const float* C, int64_t ldc);

}  // namespace braid
