#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace braid::parallel {

PipelineSchedule parse_pipeline_schedule(std::string_view name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  if (name == "interleaved") return PipelineSchedule::interleaved;
  BRAID_THROW(Error, "pipeline.schedule '", name,
              "' is not a schedule; choose gpipe, 1f1b or interleaved");
}

std::string_view schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::gpipe:
      return "gpipe";
    case PipelineSchedule::one_f_one_b:
      return "1f1b";
    case PipelineSchedule::interleaved:
      return "interleaved";
  }
  return "?";
}

std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int stage, int stages,
                                          int micro_batches, int chunks) {
  BRAID_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1 && chunks >= 1,
              "pipeline schedule: stage ", stage, " of ", stages, " with ", micro_batches,
              " micro-batches and ", chunks, " chunks");
  std::vector<PipelineAction> out;
  const int m = micro_batches;
  if (schedule == PipelineSchedule::interleaved) {
    BRAID_CHECK(m % stages == 0, "pipeline.schedule interleaved: micro_batches (", m,
                ") must be a multiple of the stages (", stages, ")");
    // Megatron-LM's order: the k-th forward is micro-batch (k / (P v)) P + k mod P of chunk
    // (k / P) mod v; backwards likewise through the chunks in reverse.
    const int P = stages, v = chunks, total = m * v;
    auto micro = [&](int k) { return (k / (P * v)) * P + k % P; };
    auto forward = [&](int k) {
      return PipelineAction{PipelineAction::forward, micro(k), (k / P) % v};
    };
    auto backward = [&](int k) {
      return PipelineAction{PipelineAction::backward, micro(k), v - 1 - (k / P) % v};
    };
    const int warmup = std::min((P - stage - 1) * 2 + (v - 1) * P, total);
    int f = 0, b = 0;
    while (f < warmup) out.push_back(forward(f++));
    while (f < total) {
      out.push_back(forward(f++));
      out.push_back(backward(b++));
    }
    while (b < total) out.push_back(backward(b++));
    return out;
  }
  if (schedule == PipelineSchedule::gpipe) {
    for (int p = 0; p < m; ++p) out.push_back({PipelineAction::forward, p});
    for (int p = 0; p < m; ++p) out.push_back({PipelineAction::backward, p});
    return out;
  }
  const int warmup = std::min(stages - stage - 1, m);
  int f = 0, b = 0;
  while (f < warmup) out.push_back({PipelineAction::forward, f++});
  while (f < m) {
    out.push_back({PipelineAction::forward, f++});
    out.push_back({PipelineAction::backward, b++});
  }
  while (b < m) out.push_back({PipelineAction::backward, b++});
  return out;
}

int in_flight(const std::vector<PipelineAction>& actions, int chunk) {
  int now = 0, most = 0;
  for (const PipelineAction& a : actions) {
    if (a.chunk != chunk) continue;
    now += a.kind == PipelineAction::forward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

double theoretical_bubble(int stages, int micro_batches, int chunks) {
  const double idle = static_cast<double>(stages - 1) / chunks;
  return idle / (micro_batches + idle);
}

std::vector<size_t> balance_stages(const std::vector<double>& costs, int parts) {
  const size_t n = costs.size();
  BRAID_CHECK(parts >= 1 && n >= static_cast<size_t>(parts), "pipeline: ", parts,
              " stages need at least as many layers, but the model has ", n, "; use fewer stages");
  const auto k = static_cast<size_t>(parts);
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[j][i]: the smallest largest run over units [0, i) cut into j runs; cut[j][i] its last
  // run's first unit.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> cut(k + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t j = 1; j <= k; ++j)
    for (size_t i = j; i <= n; ++i)
      for (size_t c = j - 1; c < i; ++c) {
        const double v = std::max(best[j - 1][c], prefix[i] - prefix[c]);
        if (v < best[j][i]) {
          best[j][i] = v;
          cut[j][i] = c;
        }
      }
  std::vector<size_t> bounds(k + 1, n);
  for (size_t j = k, i = n; j > 0; --j) {
    bounds[j] = i;
    i = cut[j][i];
    bounds[j - 1] = i;
  }
  return bounds;
}

}  // namespace braid::parallel
