// `strategy: auto` with `plan.cluster_file` and `plan.profile_file`: the job runs the planner's
// fastest configuration that fits (plan/planner.h) among those a job of equal ranks runs
// (data, tensor and pipeline axes, ZeRO; not parameter servers, whose roles the launcher
// assigns, nor local SGD, which changes the optimisation). The choice is a pure function of
// the two files, the world size and the batch, so every rank reading the same files makes
// the same one (and the start-up config agreement refuses ranks that read different ones).
// The global batch stays what the config says (batch x world, or global_batch); a choice
// with D < world replicas gets batch = global / D, each replica's share.
#pragma once

#include "train/config.h"

namespace braid::cli {

// The config with the chosen strategy's keys set, or unchanged when strategy is not auto or
// plan.cluster_file is empty. Errors: plan.cluster_file without plan.profile_file, a profile of
// another model or sequence length, no configuration that fits.
train::TrainConfig apply_plan(train::TrainConfig config, int world);

}  // namespace braid::cli
