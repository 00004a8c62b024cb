// How the predicted cost grows with the ranks: for each strategy family, its best fitting
// configuration (plan/planner.h's ranking) at 1, 2, 4, ... ranks, each rank bringing
// `batch_per_rank` samples a step (weak scaling, as the papers measure it). Efficiency is
// the forward and backward compute one rank would spend on those samples with unlimited
// memory (the profile's, at full width) over the predicted step: the share of the step
// that is the model's own arithmetic, lost to communication, bubbles, the optimizer and
// narrower kernels. A family that cannot fit at a rank count shows no point there.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/profile.h"
#include "plan/simulate.h"

namespace braid::plan {

struct ScalingPoint {
  int ranks = 0;
  std::string config;  // describe() of the family's best here
  double step_s = 0, samples_per_s = 0, efficiency = 0;
  double memory_bytes = 0;
};

struct ScalingFamily {
  std::string name;  // "ddp", "zero3", "pipeline x data", "tensor x data", "mesh", "ps"
  std::vector<ScalingPoint> points;  // only where it fits
};

struct ScalingReport {
  std::string model;
  int batch_per_rank = 0;
  double ideal_step_s = 0;  // one rank's forward and backward over batch_per_rank samples
  std::vector<int> ranks;
  std::vector<ScalingFamily> families;
};

// Rank counts 1, 2, 4, ... up to max_ranks, within one host up to ranks_per_host, then
// whole hosts.
ScalingReport scaling_report(const ModelProfile& profile, const Cluster& cluster,
                             int batch_per_rank, int max_ranks);
// The strategy family a configuration belongs to.
std::string family_of(const PlanConfig& c);
std::string scaling_table(const ScalingReport& r);
nlohmann::json scaling_json(const ScalingReport& r);

}  // namespace braid::plan
