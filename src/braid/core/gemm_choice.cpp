#include "core/gemm_choice.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace braid {
namespace {

std::atomic<GemmPolicy> g_policy{GemmPolicy::automatic};

ChoiceTable<GemmShape, GemmChoice>& table() {
  static ChoiceTable<GemmShape, GemmChoice> t;
  return t;
}

// Timed rounds per candidate: at least kMinRounds, more while a round is short (a small
// product's time is noisy), never past kMaxRounds or kBudgetSeconds of timing.
constexpr int kMinRounds = 3;
constexpr int kMaxRounds = 15;
constexpr double kBudgetSeconds = 30e-3;

}  // namespace

GemmPolicy parse_gemm_policy(std::string_view text) {
  if (text == "auto") return GemmPolicy::automatic;
  if (text == "openblas") return GemmPolicy::openblas;
  if (text == "onednn") return GemmPolicy::onednn;
  BRAID_THROW(Error, "GEMM library '", text,
              "' is not one braid knows: use auto (time both on each shape and keep the "
              "faster), openblas or onednn");
}

const char* gemm_policy_name(GemmPolicy policy) {
  switch (policy) {
    case GemmPolicy::openblas:
      return "openblas";
    case GemmPolicy::onednn:
      return "onednn";
    case GemmPolicy::automatic:
      break;
  }
  return "auto";
}

void set_gemm_policy(GemmPolicy policy) { g_policy.store(policy, std::memory_order_relaxed); }
GemmPolicy gemm_policy() { return g_policy.load(std::memory_order_relaxed); }

std::string GemmShape::str() const {
  return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " +
         (trans_a ? 'T' : 'N') + (trans_b ? 'T' : 'N');
}

std::string GemmMethod::str() const {
  return std::string(gemm_library_name(library)) + (transposed ? " transposed" : "");
}

void sgemm_by(GemmMethod method, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
              float* C, int64_t ldc) {
  if (!method.transposed) {
    sgemm_with(method.library, trans_a, trans_b, M, N, K, alpha, A, B, beta, C, lda, ldb, ldc);
    return;
  }
  // C^T[N, M] = op(B)^T op(A)^T into scratch, then C = (C^T)^T + beta C, in tiles so both
  // sides stay in cache.
  thread_local std::vector<float> t;
  t.resize(static_cast<size_t>(N * M));
  sgemm_with(method.library, !trans_b, !trans_a, N, M, K, alpha, B, A, 0.0f, t.data(), ldb, lda, M);
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < M; i0 += kTile)
    for (int64_t j0 = 0; j0 < N; j0 += kTile) {
      const int64_t i1 = std::min(M, i0 + kTile), j1 = std::min(N, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i) {
        float* c = C + i * ldc;
        if (beta == 0.0f)
          for (int64_t j = j0; j < j1; ++j) c[j] = t[static_cast<size_t>(j * M + i)];
        else
          for (int64_t j = j0; j < j1; ++j) c[j] = t[static_cast<size_t>(j * M + i)] + beta * c[j];
      }
    }
}

std::optional<GemmMethod> chosen_gemm_method(const GemmShape& shape) {
  switch (gemm_policy()) {
    case GemmPolicy::openblas:
      return GemmMethod{GemmLibrary::openblas, false};
    case GemmPolicy::onednn:
      return GemmMethod{GemmLibrary::onednn, false};
    case GemmPolicy::automatic:
      break;
  }
  const std::optional<GemmChoice> choice = table().find(shape);
  if (!choice) return std::nullopt;
  return choice->method;
}

GemmMethod gemm_rule(const GemmShape&) { return {GemmLibrary::onednn, false}; }

std::vector<GemmChoice> gemm_choices() { return table().all(); }
std::vector<GemmChoice> gemm_measurements() { return table().measured(); }
void set_gemm_choices(std::span<const GemmChoice> choices) { table().set(choices); }
void add_gemm_choices(std::span<const GemmChoice> choices) { table().add(choices); }
void clear_gemm_choices() { table().clear(); }

namespace {

GemmChoice measure(const GemmShape& shape, float alpha, const float* A, int64_t lda, const float* B,
                   int64_t ldb, float beta, const float* C, int64_t ldc) {
  // The candidates write here, never into the caller's C: the caller's product is computed
  // once, by the winner, from C as the caller left it (beta).
  thread_local std::vector<float> scratch;
  const int64_t M = shape.M, N = shape.N;
  scratch.resize(static_cast<size_t>(M * N));
  const GemmMethod candidates[] = {{GemmLibrary::openblas, false},
                                   {GemmLibrary::onednn, false},
                                   {GemmLibrary::openblas, true},
                                   {GemmLibrary::onednn, true}};
  constexpr int kCandidates = 4;
  GemmChoice choice;
  choice.shape = shape;
  for (double& s : choice.seconds) s = std::numeric_limits<double>::infinity();
  auto run = [&](const GemmMethod& method) {
    if (beta != 0.0f)
      for (int64_t i = 0; i < M; ++i) std::copy_n(C + i * ldc, N, scratch.data() + i * N);
    Stopwatch watch;
    sgemm_by(method, shape.trans_a, shape.trans_b, M, N, shape.K, alpha, A, lda, B, ldb, beta,
             scratch.data(), N);
    return watch.elapsed();
  };
  for (const GemmMethod& m : candidates) run(m);  // untimed: first-call costs
  double spent = 0;
  for (int round = 0; round < kMaxRounds && (round < kMinRounds || spent < kBudgetSeconds); ++round)
    for (int i = 0; i < kCandidates; ++i) {
      const int c = (round + i) % kCandidates;  // rotated: none always runs on a warmer cache
      const double s = run(candidates[c]);
      choice.seconds[c] = std::min(choice.seconds[c], s);
      spent += s;
    }
  const int best = static_cast<int>(std::min_element(choice.seconds, choice.seconds + kCandidates) -
                                    choice.seconds);
  choice.method = candidates[best];
  log_debug("gemm ", shape.str(), ": openblas ", choice.seconds[0] * 1e6, " us, onednn ",
            choice.seconds[1] * 1e6, " us, transposed ", choice.seconds[2] * 1e6, " / ",
            choice.seconds[3] * 1e6, " us -> ", choice.method.str());
  return choice;
}

}  // namespace

GemmMethod choose_gemm_method(const GemmShape& shape, float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, const float* C,
                              int64_t ldc) {
  return table()
      .find_or_choose(
          shape, [&] { return measure(shape, alpha, A, lda, B, ldb, beta, C, ldc); },
          [&] {
            return GemmChoice{shape, gemm_rule(shape), {0, 0, 0, 0}, ChoiceOrigin::rule};
          })
      .method;
}

}  // namespace braid
