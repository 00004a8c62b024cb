// The order in which a pipeline stage runs its micro-batches' forwards and backwards, and
// how stages are cut from a model's units.
//
// GPipe (Huang et al. 2019): every forward, then every backward; a stage holds all M
// micro-batches' activations. 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s of P
// runs min(P - s - 1, M) forwards, then alternates one forward and one backward, then the
// remaining backwards; at most P - s micro-batches are in flight, so activation memory is
// bounded by P, not M. Both idle (P - 1) / (M + P - 1) of the time when stages take equal
// time. Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual pipeline): each rank
// holds v chunks of layers (rank s: chunks s, s + P, ..., of the P v chunks), forwards go
// through the chunks in groups of P micro-batches, and the bubble shrinks v-fold to
// ((P - 1) / v) / (M + (P - 1) / v); M must be a multiple of P. Positions are 0..M-1 in
// both directions, and each chunk's backwards come in position order (what deterministic
// mode's fixed summation order needs).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace braid::parallel {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };

// "gpipe", "1f1b" or "interleaved"; anything else is an error naming the choices.
PipelineSchedule parse_pipeline_schedule(std::string_view name);
std::string_view schedule_name(PipelineSchedule schedule);

struct PipelineAction {
  enum Kind { forward, backward };
  Kind kind = forward;
  int position = 0;  // 0..M-1: the position's micro-batch forward or backward
  int chunk = 0;     // which of the rank's chunks (0 unless interleaved)
};

// Stage `stage` of `stages`' actions over `micro_batches` micro-batches, with `chunks` (v)
// chunks a rank under the interleaved schedule (1 otherwise).
std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int stage, int stages,
                                          int micro_batches, int chunks = 1);
// The most micro-batches of `chunk` whose forward is done and backward not yet in `actions`.
int in_flight(const std::vector<PipelineAction>& actions, int chunk);
// The idle fraction of a stage when every stage's forward and backward take equal time:
// ((P - 1) / v) / (M + (P - 1) / v); v = 1 but under the interleaved schedule.
double theoretical_bubble(int stages, int micro_batches, int chunks = 1);

// Cuts `costs` (one per unit, in order) into `parts` contiguous runs of at least one unit,
// minimising the largest run's sum (ties: the earliest cut). Returns parts + 1 boundaries:
// run i is units [b[i], b[i + 1]). An error when there are fewer units than parts.
std::vector<size_t> balance_stages(const std::vector<double>& costs, int parts);

}  // namespace braid::parallel
