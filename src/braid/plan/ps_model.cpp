#include "plan/ps_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace braid::plan {

double expected_order_statistic(int n, int k, double jitter) {
  BRAID_CHECK(n >= 1 && k >= 1 && k <= n, "plan: order statistic ", k, " of ", n);
  if (jitter == 0) return 1;
  constexpr int kTrials = 4000;
  Rng rng(12345);  // fixed: the same plan everywhere
  std::vector<double> draws(static_cast<size_t>(n));
  double sum = 0;
  for (int t = 0; t < kTrials; ++t) {
    for (double& d : draws) {
      // Box-Muller: a standard normal from two uniforms.
      const double u1 = std::max(1e-12, static_cast<double>(rng.uniform()));
      const double u2 = static_cast<double>(rng.uniform());
      d = 1 + jitter * std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
    }
    std::nth_element(draws.begin(), draws.begin() + (k - 1), draws.end());
    sum += draws[static_cast<size_t>(k - 1)];
  }
  return sum / kTrials;
}

PsRate ps_rate(PsMode mode, int workers, int backup, int staleness, double jitter, double compute_s,
               double worker_exchange_s, double server_s, int batch_per_worker) {
  BRAID_CHECK(backup >= 0 && backup < workers, "plan: ", backup, " backup workers of ", workers);
  PsRate r;
  const double b = batch_per_worker;
  switch (mode) {
    case PsMode::sync: {
      const int counted = workers - backup;
      r.step_s = compute_s * expected_order_statistic(workers, counted, jitter) +
                 std::max(worker_exchange_s, server_s);
      r.samples_per_s = counted * b / r.step_s;
      break;
    }
    case PsMode::async: {
      r.step_s = compute_s + worker_exchange_s;
      r.samples_per_s = std::min(workers * b / r.step_s, b / server_s);
      break;
    }
    case PsMode::ssp: {
      const double lag = expected_order_statistic(workers, workers, jitter) - 1;
      r.step_s = compute_s * (1 + lag / (staleness + 1)) + worker_exchange_s;
      r.samples_per_s = std::min(workers * b / r.step_s, b / server_s);
      break;
    }
  }
  return r;
}

}  // namespace braid::plan
