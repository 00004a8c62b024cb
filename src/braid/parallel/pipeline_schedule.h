// The order in which a pipeline stage runs its micro-batches' forwards and backwards, and
// how stages are cut from a model's units.
//
// GPipe (Huang et al. 2019): every forward, then every backward; a stage holds all M
// micro-batches' activations. 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s of P
// runs min(P - s - 1, M) forwards, then alternates one forward and one backward, then the
// remaining backwards; at most P - s micro-batches are in flight, so activation memory is
// bounded by P, not M. Both idle (P - 1) / (M + P - 1) of the time when stages take equal
// time. Positions are 0..M-1 in both directions, so backwards finish in position order
// (what deterministic mode's fixed summation order needs).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace braid::parallel {

enum class PipelineSchedule { gpipe, one_f_one_b };

// "gpipe" or "1f1b"; anything else is an error naming the choices.
PipelineSchedule parse_pipeline_schedule(std::string_view name);
std::string_view schedule_name(PipelineSchedule schedule);

struct PipelineAction {
  enum Kind { forward, backward };
  Kind kind = forward;
  int position = 0;  // 0..M-1: the position's micro-batch forward or backward
};

// Stage `stage` of `stages`' actions over `micro_batches` micro-batches.
std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int stage, int stages,
                                          int micro_batches);
// The most micro-batches whose forward is done and backward not yet on that stage.
int in_flight_limit(PipelineSchedule schedule, int stage, int stages, int micro_batches);
// The idle fraction of a stage when every stage's forward and backward take equal time:
// (P - 1) / (M + P - 1).
double theoretical_bubble(int stages, int micro_batches);

// Cuts `costs` (one per unit, in order) into `parts` contiguous runs of at least one unit,
// minimising the largest run's sum (ties: the earliest cut). Returns parts + 1 boundaries:
// run i is units [b[i], b[i + 1]). An error when there are fewer units than parts.
std::vector<size_t> balance_stages(const std::vector<double>& costs, int parts);

}  // namespace braid::parallel
