#include "core/gemm_choice.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "core/choice_table.h"
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

std::optional<GemmLibrary> chosen_gemm_library(const GemmShape& shape) {
  switch (gemm_policy()) {
    case GemmPolicy::openblas:
      return GemmLibrary::openblas;
    case GemmPolicy::onednn:
      return GemmLibrary::onednn;
    case GemmPolicy::automatic:
      break;
  }
  const std::optional<GemmChoice> choice = table().find(shape);
  if (!choice) return std::nullopt;
  return choice->library;
}

std::vector<GemmChoice> gemm_choices() { return table().all(); }
void set_gemm_choices(std::span<const GemmChoice> choices) { table().set(choices); }
void clear_gemm_choices() { table().clear(); }

namespace {

GemmChoice measure(const GemmShape& shape, float alpha, const float* A, int64_t lda, const float* B,
                   int64_t ldb, float beta, const float* C, int64_t ldc) {
  // The candidates write here, never into the caller's C: the caller's product is computed
  // once, by the winner, from C as the caller left it (beta).
  thread_local std::vector<float> scratch;
  const int64_t M = shape.M, N = shape.N;
  scratch.resize(static_cast<size_t>(M * N));
  const GemmLibrary candidates[] = {GemmLibrary::openblas, GemmLibrary::onednn};
  double best[2] = {std::numeric_limits<double>::infinity(),
                    std::numeric_limits<double>::infinity()};
  auto run = [&](GemmLibrary library) {
    if (beta != 0.0f)
      for (int64_t i = 0; i < M; ++i) std::copy_n(C + i * ldc, N, scratch.data() + i * N);
    Stopwatch watch;
    sgemm_with(library, shape.trans_a, shape.trans_b, M, N, shape.K, alpha, A, B, beta,
               scratch.data(), lda, ldb, N);
    return watch.elapsed();
  };
  for (const GemmLibrary library : candidates) run(library);  // untimed: first-call costs
  double spent = 0;
  for (int round = 0; round < kMaxRounds && (round < kMinRounds || spent < kBudgetSeconds); ++round)
    for (int i = 0; i < 2; ++i) {
      const int c = (round + i) % 2;  // alternated, so neither always runs on a warmer cache
      const double s = run(candidates[c]);
      best[c] = std::min(best[c], s);
      spent += s;
    }

  GemmChoice choice;
  choice.shape = shape;
  choice.openblas_s = best[0];
  choice.onednn_s = best[1];
  choice.library = best[1] < best[0] ? GemmLibrary::onednn : GemmLibrary::openblas;
  log_debug("gemm ", shape.str(), ": openblas ", best[0] * 1e6, " us, onednn ", best[1] * 1e6,
            " us -> ", gemm_library_name(choice.library));
  return choice;
}

}  // namespace

GemmLibrary measure_gemm_choice(const GemmShape& shape, float alpha, const float* A, int64_t lda,
                                const float* B, int64_t ldb, float beta, const float* C,
                                int64_t ldc) {
  return table()
      .find_or_measure(shape, [&] { return measure(shape, alpha, A, lda, B, ldb, beta, C, ldc); })
      .library;
}

}  // namespace braid
