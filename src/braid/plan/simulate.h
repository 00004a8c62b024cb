// One training step of a configuration, simulated over a model's profile (plan/profile.h)
// and a cluster (plan/cluster.h): predicted step time, its split, and memory per rank.
//
// The ranks of a data x tensor x pipeline mesh (laid out as comm::make_mesh lays them:
// rank = (p D + d) T + t) are alike within a pipeline stage, so one replica is simulated:
// one representative rank per stage, as a task graph (plan/event_sim.h) with, per stage,
// its compute, its two neighbour links and its data-parallel stream. Collectives across
// the D replicas or the T slices are costed from their algorithms' steps over the links
// their groups cross (plan/collective_cost.h), so 4,096 ranks cost what 4 do.
//
//   compute   a stage runs its micro-batches' forwards and backwards in the order of
//             parallel/pipeline_schedule.h (stage_actions), its units cut by
//             balance_stages as the pipeline cuts them; a unit's time is its profile's
//             at the micro-batch size, over the rank's speed; a GPT block under tensor
//             parallelism takes its measured slice's time and its sums, inline (they block).
//   pipeline  a forward waits for the previous stage's output sent over the link; a
//             backward for the next stage's gradient.
//   data      after a unit's last backward its gradients join a bucket (bucket_mb, in
//             backward order, as parallel/buckets.h fills them); a full bucket's allreduce
//             (ZeRO: reduce-scatter) starts on the stage's stream at once, overlapping
//             the backwards left. The optimizer runs when the last has ended (ZeRO: on
//             1/D of the parameters), then ZeRO 1-2 all-gather the updated parameters.
//             ZeRO 3 gathers a unit's parameters when its forward announces them and
//             again when the unit above it is done in backward, as zero.cpp does.
//   others    parameter servers (every worker pushes its gradients to S servers and pulls
//             the parameters back; the servers' links carry W/S of every worker's bytes;
//             sync, backup workers, async and SSP as plan/ps_model.h rates them), local
//             SGD (an allreduce of the parameters every H steps).
//
// The split: compute is the busiest stage's own work; bubble is what the same graph with
// free communication adds to it (pipeline waits); exposed communication is the rest.
#pragma once

#include <string>

#include "parallel/pipeline_schedule.h"
#include "plan/cluster.h"
#include "plan/profile.h"
#include "plan/ps_model.h"

namespace braid::plan {

enum class Method { data_parallel, parameter_server, local_sgd };

struct PlanConfig {
  Method method = Method::data_parallel;
  int data = 1, tensor = 1, pipeline = 1;  // D x T x P ranks (data_parallel)
  int zero_stage = 0;                      // 0: DDP's allreduce
  int micro_batches = 1;                   // M (pipelines)
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::one_f_one_b;
  int chunks = 1;  // interleaved: chunks a stage
  bool recompute = false;
  double bucket_bytes = 25.0 * 1024 * 1024;
  // Bytes on the wire per gradient byte: 1 fp32, 0.5 bf16 (comm_dtype), ~0.25 int8.
  double wire_ratio = 1;
  // A lossy codec (plan/codec_profile.h): its name, and its encode and decode per float,
  // added to each bucket's reduction on the stream.
  std::string codec;
  double codec_s_per_float = 0;
  int servers = 1;                // parameter_server: S of the ranks serve, the rest work
  PsMode ps_mode = PsMode::sync;  // parameter_server's rules (plan/ps_model.h)
  int backup_workers = 0;
  int staleness = 2;
  int local_period = 1;  // local_sgd: H steps between averages
  int ranks() const;
};

// Bytes a rank holds, by category.
struct RankMemory {
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return params + grads + optimizer + activations; }
};

struct Prediction {
  double step_s = 0;
  double compute_s = 0, exposed_comm_s = 0, bubble_s = 0;
  double samples_per_s = 0;
  double comm_bytes = 0;  // bytes a data-parallel rank sends a step (the ZeRO ratio test)
  double busy_share = 1;  // a rank's compute over the step (mean over stages)
  RankMemory memory;      // the fullest rank's
  bool fits = true;       // memory.total() within the cluster's memory a rank
};

// `batch` is the global batch a step (every replica's samples together). Errors name a
// configuration that cannot run (D x T x P not the cluster's ranks, M not dividing the
// replica's batch, more stages than units, a width the profile lacks).
Prediction simulate(const ModelProfile& profile, const Cluster& cluster, const PlanConfig& config,
                    int batch);

// "ddp", "zero2", "pipeline P=4 M=8 1f1b", "mesh D=2 T=2 P=2 M=4 1f1b zero1", ...
std::string describe(const PlanConfig& c);

}  // namespace braid::plan
