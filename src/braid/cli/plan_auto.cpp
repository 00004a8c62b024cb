#include "cli/plan_auto.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/profile.h"

namespace braid::cli {

train::TrainConfig apply_plan(train::TrainConfig config, int world) {
  if (config.strategy != "auto" || config.plan.cluster_file.empty()) return config;
  BRAID_CHECK(
      !config.plan.profile_file.empty(),
      "plan.cluster_file needs plan.profile_file, the model's measured profile: run `braid plan "
      "--model ... --cluster ",
      config.plan.cluster_file, " --profile FILE` once, then pass --plan.profile-file FILE");
  const plan::Cluster cluster = plan::load_cluster(config.plan.cluster_file).with_ranks(world);
  std::ifstream in(config.plan.profile_file);
  BRAID_CHECK(in.good(), "plan.profile_file '", config.plan.profile_file,
              "' cannot be read; write it with `braid plan --model ... --profile ",
              config.plan.profile_file, "`");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    BRAID_THROW(Error, "plan.profile_file '", config.plan.profile_file,
                "' is not JSON: ", e.what());
  }
  const plan::ModelProfile profile =
      plan::parse_profile(j, "plan.profile_file '" + config.plan.profile_file + "'");
  BRAID_CHECK(profile.model == config.model, "plan.profile_file '", config.plan.profile_file,
              "' is of model ", profile.model.dump(), ", but this run trains ", config.model.dump(),
              "; measure this model's profile");
  BRAID_CHECK(profile.seq_len == 0 || profile.seq_len == config.seq_len, "plan.profile_file '",
              config.plan.profile_file, "' was measured at seq_len ", profile.seq_len,
              ", this run has ", config.seq_len);
  const int64_t global = config.global_batch > 0 ? config.global_batch : config.batch * world;
  plan::PlanOptions options;
  options.batch = static_cast<int>(global);
  options.include_local_sgd = false;
  const std::vector<plan::Candidate> ranked = plan::plan_all(profile, cluster, options);
  const plan::Candidate* chosen = nullptr;
  for (const plan::Candidate& c : ranked) {
    if (c.prediction.fits && c.config.method == plan::Method::data_parallel) {
      chosen = &c;
      break;
    }
  }
  BRAID_CHECK(chosen != nullptr, "strategy auto: no configuration of this model fits the ",
              "memory of cluster '", config.plan.cluster_file, "' on ", world,
              " ranks (braid plan lists what each needs); add ranks or memory");
  const plan::PlanConfig& c = chosen->config;
  const int axes = (c.data > 1) + (c.tensor > 1) + (c.pipeline > 1);
  config.strategy = axes == 0 ? "single" : c.tensor == 1 && c.pipeline == 1 ? "ddp" : "mesh";
  config.mesh.data = c.data;
  config.mesh.tensor = c.tensor;
  config.mesh.pipeline = c.pipeline;
  if (config.strategy != "mesh") config.mesh = {};
  config.zero_stage = c.zero_stage;
  config.bucket_mb = c.bucket_bytes / (1024.0 * 1024.0);
  if (c.wire_ratio == 0.5) config.comm_dtype = "bf16";
  config.pipeline.micro_batches = c.micro_batches;
  config.pipeline.schedule = std::string(parallel::schedule_name(c.schedule));
  config.pipeline.chunks = c.chunks;
  config.pipeline.recompute = c.recompute;
  if (c.data < world) {
    config.batch = global / c.data;
    config.global_batch = 0;
  }
  log_info("strategy auto: braid plan chose ", plan::describe(c), " for ", world, " ranks (",
           chosen->prediction.samples_per_s, " samples/s predicted, ",
           chosen->prediction.step_s * 1e3, " ms a step)");
  return config;
}

}  // namespace braid::cli
