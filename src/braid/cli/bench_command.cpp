// `braid bench peak`: what this CPU can do (fp32 FMA, bf16 dot, sgemm at the models'
// shapes). `braid bench train` (bench_train_command.cpp) and the collectives
// (bench_collective_command.cpp) register here too. Benchmarks report; they never fail on a
// figure.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli/commands.h"
#include "cli/median.h"
#include "core/cpu.h"
#include "core/gemm.h"
#include "core/gemm_choice.h"
#include "core/memory.h"
#include "core/peak.h"
#include "core/timer.h"
#include "data/loader.h"
#include "train/trainer.h"

namespace braid::cli {
namespace {

struct PeakShape {
  const char* where;
  bool trans_a, trans_b;
  int64_t m, n, k;
};

// What sgemm chooses for `s` on this machine now (measured on first sight, or forced).
GemmMethod run_time_choice(const PeakShape& s) {
  const std::vector<float> a(static_cast<size_t>(s.m * s.k), 0.5f),
      b(static_cast<size_t>(s.k * s.n), 0.25f);
  std::vector<float> c(static_cast<size_t>(s.m * s.n));
  sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, c.data());
  return *chosen_gemm_method({s.trans_a, s.trans_b, s.m, s.n, s.k});
}

// The products of one training step of each model: forward (x W^T), the weight gradient
// (dy^T x) and the input gradient (dy W).
constexpr PeakShape kGemmShapes[] = {
    {"reference 128x1024x1024 NN", false, false, 128, 1024, 1024},
    {"mlp fc1 forward", false, true, 128, 1024, 784},
    {"mlp fc1 weight grad", true, false, 1024, 784, 128},
    {"mlp fc2 forward", false, true, 128, 1024, 1024},
    {"mlp fc2 weight grad", true, false, 1024, 1024, 128},
    {"mlp fc2 input grad", false, false, 128, 1024, 1024},
    {"cnn conv2 forward (im2col)", false, false, 128 * 121, 64, 288},
    {"cnn conv2 weight grad", true, false, 288, 64, 128 * 121},
    {"cnn conv2 input grad", false, true, 128 * 121, 288, 64},
    {"cnn fc1 forward", false, true, 128, 128, 1600},
    {"gpt-tiny c_fc forward", false, true, 4096, 512, 128},
    {"gpt-tiny c_fc weight grad", true, false, 512, 128, 4096},
    {"gpt-tiny c_attn input grad", false, false, 4096, 128, 384},
    {"gpt-tiny c_proj input grad", false, false, 4096, 512, 128},
};

void run_peak(bool json, double seconds) {
  set_blas_threads(1);
  // Levels this CPU lacks are reported as unavailable, not measured.
  auto fma = [&](Isa isa) {
    return isa_supported(isa) ? measure_fma_peak(isa, seconds) : PeakResult{};
  };
  const PeakResult avx512 = fma(Isa::avx512);
  const PeakResult avx2 = fma(Isa::avx2);
  const PeakResult bf16 =
      isa_supported(Isa::avx512_bf16) ? measure_bf16_dot_peak(seconds) : PeakResult{};
  nlohmann::json out = {{"cpu", cpu_description()}, {"blas", blas_config()}};
  auto row = [&](const char* what, const PeakResult& r) {
    out["peaks"].push_back({{"what", what},
                            {"available", r.available},
                            {"best_gflops", r.best_gflops},
                            {"median_gflops", r.median_gflops}});
    if (json) return;
    if (r.available)
      std::printf("%-34s %10.1f %10.1f\n", what, r.best_gflops, r.median_gflops);
    else
      std::printf("%-34s %21s\n", what, "not on this CPU");
  };
  if (!json) {
    std::printf("%s\n%s\n\n%-34s %10s %10s\n", cpu_description().c_str(), blas_config().c_str(),
                "kernel (one thread)", "best", "median");
    std::printf("%-34s %10s %10s\n", "", "GFLOP/s", "GFLOP/s");
  }
  row("fp32 FMA, AVX-512", avx512);
  row("fp32 FMA, AVX2", avx2);
  row("bf16 dot (VDPBF16PS)", bf16);
  if (!json)
    std::printf("\n%-34s %21s %21s  %s\n%-34s %10s %10s %10s %10s\n", "sgemm (one thread), GFLOP/s",
                "OpenBLAS", "oneDNN", "braid uses", "", "best", "median", "best", "median");
  for (const PeakShape& s : kGemmShapes) {
    // Alternate the libraries in short rounds so a slow spell of the machine hits both.
    std::vector<double> best(2, 0), medians[2];
    for (int round = 0; round < 3; ++round)
      for (int lib = 0; lib < 2; ++lib) {
        const PeakResult r = measure_sgemm(lib ? GemmLibrary::onednn : GemmLibrary::openblas,
                                           s.trans_a, s.trans_b, s.m, s.n, s.k, 10);
        best[lib] = std::max(best[lib], r.best_gflops);
        medians[lib].push_back(r.median_gflops);
      }
    const std::string uses = run_time_choice(s).str();
    const double median_openblas = median(medians[0]), median_onednn = median(medians[1]);
    out["sgemm"].push_back({{"what", s.where},
                            {"trans_a", s.trans_a},
                            {"trans_b", s.trans_b},
                            {"m", s.m},
                            {"n", s.n},
                            {"k", s.k},
                            {"openblas_best_gflops", best[0]},
                            {"openblas_median_gflops", median_openblas},
                            {"onednn_best_gflops", best[1]},
                            {"onednn_median_gflops", median_onednn},
                            {"braid_uses", uses}});
    if (!json)
      std::printf("%-34s %10.1f %10.1f %10.1f %10.1f  %s\n", s.where, best[0], median_openblas,
                  best[1], median_onednn, uses.c_str());
  }
  if (json) std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (report figures; never fail on them)");
  bench->require_subcommand(1);

  struct PeakFlags {
    bool json = false;
    double seconds = 0.5;
  };
  auto pf = std::make_shared<PeakFlags>();
  CLI::App* peak = bench->add_subcommand("peak", "fp32 FMA, bf16 dot and sgemm GFLOP/s");
  peak->add_flag("--json", pf->json, "one JSON object instead of a table");
  peak->add_option("--seconds", pf->seconds, "seconds per peak kernel");
  peak->callback([pf] { run_peak(pf->json, pf->seconds); });

  add_train_bench(*bench);
  add_collective_benches(*bench);
  add_ps_bench(*bench);
  add_serve_bench(*bench);
  add_decode_bench(*bench);
}

}  // namespace braid::cli
