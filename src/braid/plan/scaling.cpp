#include "plan/scaling.h"

#include <cstdio>
#include <map>

#include "core/error.h"
#include "plan/planner.h"

namespace braid::plan {

std::string family_of(const PlanConfig& c) {
  if (c.method == Method::parameter_server) return "ps";
  if (c.method == Method::local_sgd) return "local_sgd";
  if (c.tensor > 1 && c.pipeline > 1) return "mesh";
  if (c.tensor > 1) return "tensor x data";
  if (c.pipeline > 1) return "pipeline x data";
  if (c.data == 1) return "single";
  return c.zero_stage == 0 ? "ddp" : "zero" + std::to_string(c.zero_stage);
}

ScalingReport scaling_report(const ModelProfile& profile, const Cluster& cluster,
                             int batch_per_rank, int max_ranks) {
  BRAID_CHECK(batch_per_rank >= 1, "plan scaling: batch per rank must be at least 1");
  ScalingReport r;
  r.model = profile.model.is_string() ? profile.model.get<std::string>() : profile.model.dump();
  r.batch_per_rank = batch_per_rank;
  const double speed = cluster.speed(profile.threads);
  for (const UnitProfile& u : profile.units)
    r.ideal_step_s += (u.forward.at(batch_per_rank) + u.backward.at(batch_per_rank)) / speed;
  for (int n = 1; n <= max_ranks; n *= 2)
    if (n <= cluster.ranks_per_host || n % cluster.ranks_per_host == 0) r.ranks.push_back(n);
  std::map<std::string, size_t> index;
  const std::vector<std::string> order = {
      "single", "ddp", "zero1", "zero2", "zero3", "pipeline x data", "tensor x data", "mesh", "ps"};
  for (const std::string& name : order) {
    index[name] = r.families.size();
    r.families.push_back({name, {}});
  }
  for (int n : r.ranks) {
    PlanOptions options;
    options.batch = batch_per_rank * n;
    options.include_local_sgd = false;
    options.quick = true;
    const std::vector<Candidate> ranked = plan_all(profile, cluster.with_ranks(n), options);
    std::map<std::string, bool> seen;
    for (const Candidate& c : ranked) {  // fastest first: each family's first is its best
      if (!c.prediction.fits || !c.same_training) continue;
      const std::string family = family_of(c.config);
      if (seen[family] || !index.count(family)) continue;
      seen[family] = true;
      ScalingPoint p;
      p.ranks = n;
      p.config = describe(c.config);
      p.step_s = c.prediction.step_s;
      p.samples_per_s = c.prediction.samples_per_s;
      p.efficiency = r.ideal_step_s / c.prediction.step_s;
      p.memory_bytes = c.prediction.memory.total();
      r.families[index[family]].points.push_back(p);
    }
  }
  return r;
}

std::string scaling_table(const ScalingReport& r) {
  std::string out;
  char line[512];
  std::snprintf(
      line, sizeof line,
      "model %s, %d samples a rank a step; one rank's forward and backward: %.4g s a step\n",
      r.model.c_str(), r.batch_per_rank, r.ideal_step_s);
  out += line;
  std::snprintf(line, sizeof line, "%-16s %6s %12s %14s %10s  %s\n", "family", "ranks", "step s",
                "samples/s", "efficiency", "best configuration");
  out += line;
  for (const ScalingFamily& f : r.families) {
    for (const ScalingPoint& p : f.points) {
      std::snprintf(line, sizeof line, "%-16s %6d %12.4g %14.1f %9.1f%%  %s\n", f.name.c_str(),
                    p.ranks, p.step_s, p.samples_per_s, 100 * p.efficiency, p.config.c_str());
      out += line;
    }
  }
  return out;
}

nlohmann::json scaling_json(const ScalingReport& r) {
  nlohmann::json j = {{"model", r.model},
                      {"batch_per_rank", r.batch_per_rank},
                      {"ideal_step_s", r.ideal_step_s},
                      {"families", nlohmann::json::array()}};
  for (const ScalingFamily& f : r.families) {
    nlohmann::json points = nlohmann::json::array();
    for (const ScalingPoint& p : f.points)
      points.push_back({{"ranks", p.ranks},
                        {"config", p.config},
                        {"step_s", p.step_s},
                        {"samples_per_s", p.samples_per_s},
                        {"efficiency", p.efficiency},
                        {"memory_bytes", p.memory_bytes}});
    j["families"].push_back({{"name", f.name}, {"points", points}});
  }
  return j;
}

}  // namespace braid::plan
