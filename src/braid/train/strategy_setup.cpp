#include "train/strategy_setup.h"

#include "comm/group.h"
#include "parallel/ddp.h"
#include "parallel/local_sgd.h"
#include "parallel/single_process.h"

namespace braid::train {

parallel::StepOptions step_options(const TrainConfig& config) {
  parallel::StepOptions o;
  o.optimizer = config.optimizer;
  o.clip_grad_norm = static_cast<float>(config.clip_grad_norm);
  o.label_smoothing = static_cast<float>(config.label_smoothing);
  o.seed = config.seed;
  o.accumulate_steps = static_cast<int>(config.accumulate_steps);
  o.deterministic = config.deterministic;
  return o;
}

std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer(
    const TrainConfig& config, const std::shared_ptr<comm::Group>& group) {
  if (!config.sync_batchnorm || !group || group->size() == 1) return nullptr;
  return std::make_shared<parallel::GroupStatsReducer>(group);
}

std::unique_ptr<parallel::Strategy> make_strategy(
    const TrainConfig& config, std::unique_ptr<nn::Module> module,
    std::shared_ptr<comm::Group> group,
    std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer) {
  const int world = group ? group->size() : 1;
  std::string name = config.strategy;
  if (name == "auto") name = world > 1 ? "ddp" : "single";
  if (name == "single") {
    BRAID_CHECK(world == 1, "strategy 'single' runs one process, but this job has ", world,
                " ranks; use strategy 'ddp' (or 'auto'), or run without a launcher");
    return std::make_unique<parallel::SingleProcess>(std::move(module), step_options(config));
  }
  if (name == "ddp" || name == "local_sgd") {
    BRAID_CHECK(group, "strategy '", name,
                "' needs a job: run it under braid launch -n N (or torchrun, mpirun, srun)");
    parallel::DdpOptions d;
    d.bucket_bytes = static_cast<size_t>(config.bucket_mb * (1 << 20));
    d.batchnorm_reducer = std::move(batchnorm_reducer);
    if (name == "ddp")
      return std::make_unique<parallel::Ddp>(std::move(module), step_options(config),
                                             std::move(group), d);
    const parallel::LocalSgdOptions local{.period = static_cast<int>(config.local_sgd.period),
                                          .start_step = config.local_sgd.start_step};
    return std::make_unique<parallel::LocalSgd>(std::move(module), step_options(config),
                                                std::move(group), local, d);
  }
  BRAID_THROW(Error, "unknown strategy '", name, "'; choose auto, single, ddp or local_sgd");
}

}  // namespace braid::train
