#include "train/strategy_setup.h"

#include <cmath>

#include "comm/group.h"
#include "parallel/ddp.h"
#include "parallel/local_sgd.h"
#include "parallel/pipeline.h"
#include "parallel/tensor_parallel.h"
#include "parallel/ps_evaluator.h"
#include "parallel/ps_worker.h"
#include "parallel/single_process.h"
#include "parallel/zero.h"

namespace braid::train {

parallel::StepOptions step_options(const TrainConfig& config) {
  parallel::StepOptions o;
  o.optimizer = config.optimizer;
  o.clip_grad_norm = static_cast<float>(config.clip_grad_norm);
  o.label_smoothing = static_cast<float>(config.label_smoothing);
  o.seed = config.seed;
  o.accumulate_steps = static_cast<int>(config.accumulate_steps);
  o.deterministic = config.deterministic;
  o.precision = config.precision == "bf16"   ? nn::Precision::bf16
                : config.precision == "fp16" ? nn::Precision::fp16
                                             : nn::Precision::fp32;
  if (o.precision == nn::Precision::fp16)
    o.loss_scaling = optim::LossScalerConfig{
        .initial_scale = std::ldexp(1.0f, static_cast<int>(config.fp16.initial_scale_power)),
        .window = config.fp16.loss_scale_window,
        .hysteresis = static_cast<int>(config.fp16.hysteresis)};
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
    std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer,
    std::optional<parallel::PsLayout> ps) {
  const int world = group ? group->size() : 1;
  std::string name = config.strategy;
  if (name == "auto")
    name = ps                             ? "ps"
           : config.pipeline.stages > 1   ? "pipeline"
           : config.tensor_parallel > 1   ? "tensor"
           : world > 1                    ? "ddp"
                                          : "single";
  BRAID_CHECK(!ps || name == "ps" || name == "fedavg", "strategy '", name,
              "' runs in a job of equal ranks, but this is a parameter-server job (",
              ps ? ps->workers : 0, " workers, ", ps ? ps->servers : 0,
              " servers); use strategy ps, or launch with -n N instead of --servers/--workers");
  if (name == "ps" || name == "fedavg") {
    // Federated averaging's workers pull the global model and push their clients' changes
    // through the same parameter-server exchange (train/trainer_fedavg.cpp drives it).
    BRAID_CHECK(ps && group, "strategy '", name,
                "' runs in a parameter-server job: start it with braid launch --servers S "
                "--workers W (or TF_CONFIG, DMLC_* variables, --cluster)");
    BRAID_CHECK(!config.sync_batchnorm,
                "sync_batchnorm needs every rank's batch statistics at each layer; parameter-"
                "server workers do not talk during a step: drop sync_batchnorm");
    BRAID_CHECK(config.clip_grad_norm == 0 || name == "fedavg",
                "clip_grad_norm clips by the norm of the whole gradient, which no parameter "
                "server sees (each holds a range): drop clip_grad_norm under strategy ps");
    const parallel::PsRules rules = ps_rules(config, ps->workers);
    parallel::validate(rules);
    if (ps->is_evaluator(group->rank()))
      return std::make_unique<parallel::PsEvaluator>(std::move(module), step_options(config),
                                                     std::move(group), *ps);
    return std::make_unique<parallel::PsWorker>(std::move(module), step_options(config),
                                                std::move(group), *ps);
  }
  BRAID_CHECK(config.pipeline.stages <= 1 || name == "pipeline", "pipeline.stages (",
              config.pipeline.stages, ") cuts the model into stages, which strategy '", name,
              "' does not; use strategy pipeline (or auto)");
  BRAID_CHECK(config.tensor_parallel <= 1 || name == "tensor", "tensor_parallel (",
              config.tensor_parallel, ") cuts the GPT by width, which strategy '", name,
              "' does not; use strategy tensor (or auto)");
  BRAID_CHECK(config.precision != "fp16" || name == "single" || name == "ddp" ||
                  name == "pipeline" || name == "tensor",
              "precision fp16 needs its loss scaler in the update, which strategy '", name,
              "' does not run on this rank; use strategy single or ddp, or precision bf16 "
              "(no loss scaling needed)");
  BRAID_CHECK(config.zero_stage == 0 || name == "ddp",
              "zero_stage shards the state of data "
              "parallelism across ranks: use it with strategy ddp (under a launcher), not '",
              name, "'");
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
    d.comm_dtype = config.comm_dtype == "bf16"   ? DType::bf16
                   : config.comm_dtype == "fp16" ? DType::f16
                                                 : DType::f32;
    if (name == "ddp" && config.zero_stage > 0) {
      BRAID_CHECK(config.zero_stage < 3 || config.ema_decay == 0,
                  "ema_decay keeps an average "
                  "of the whole parameters, which no rank holds under zero_stage 3; use "
                  "zero_stage 2 or drop ema_decay");
      BRAID_CHECK(config.comm_dtype == "fp32", "comm_dtype ", config.comm_dtype,
                  ": 16-bit gradients on the wire are not built for zero_stage yet; use "
                  "comm_dtype fp32 or zero_stage 0");
      const parallel::ZeroOptions z{.stage = static_cast<int>(config.zero_stage),
                                    .bucket_bytes = d.bucket_bytes,
                                    .first_bucket_bytes = d.first_bucket_bytes,
                                    .batchnorm_reducer = d.batchnorm_reducer};
      return std::make_unique<parallel::Zero>(std::move(module), step_options(config),
                                              std::move(group), z);
    }
    if (name == "ddp")
      return std::make_unique<parallel::Ddp>(std::move(module), step_options(config),
                                             std::move(group), d);
    const parallel::LocalSgdOptions local{.period = static_cast<int>(config.local_sgd.period),
                                          .start_step = config.local_sgd.start_step};
    return std::make_unique<parallel::LocalSgd>(std::move(module), step_options(config),
                                                std::move(group), local, d);
  }
  if (name == "pipeline") {
    BRAID_CHECK(group, "strategy pipeline needs a job of one rank a stage: run it under braid "
                       "launch -n P (or torchrun, mpirun, srun)");
    BRAID_CHECK(config.pipeline.stages == 0 || config.pipeline.stages == world,
                "pipeline.stages is ", config.pipeline.stages, " but the job has ", world,
                " ranks; each rank is one stage (launch -n ", config.pipeline.stages,
                ", or set pipeline.stages to ", world, ")");
    BRAID_CHECK(!config.sync_batchnorm, "sync_batchnorm shares statistics between data-parallel "
                                        "ranks; a pipeline's stages hold different layers: drop it");
    BRAID_CHECK(config.ema_decay == 0, "ema_decay averages the whole parameters every step, "
                                       "which no pipeline stage holds; drop ema_decay");
    parallel::PipelineOptions p;
    p.micro_batches = static_cast<int>(config.pipeline.micro_batches);
    p.schedule = parallel::parse_pipeline_schedule(config.pipeline.schedule);
    p.recompute = config.pipeline.recompute;
    return std::make_unique<parallel::Pipeline>(std::move(module), step_options(config),
                                                std::move(group), p);
  }
  if (name == "tensor") {
    BRAID_CHECK(group, "strategy tensor needs a job of the ranks that share the model: run it "
                       "under braid launch -n T (or torchrun, mpirun, srun)");
    BRAID_CHECK(config.tensor_parallel == 0 || config.tensor_parallel == world,
                "tensor_parallel is ", config.tensor_parallel, " but the job has ", world,
                " ranks; each rank holds one part (launch -n ", config.tensor_parallel,
                ", or set tensor_parallel to ", world, ")");
    BRAID_CHECK(config.ema_decay == 0, "ema_decay averages the whole parameters every step, "
                                       "which no tensor-parallel rank holds; drop ema_decay");
    return std::make_unique<parallel::TensorParallel>(std::move(module), step_options(config),
                                                      std::move(group));
  }
  BRAID_THROW(Error, "unknown strategy '", name,
              "'; choose auto, single, ddp, local_sgd, ps, fedavg, pipeline or tensor");
}

parallel::PsRules ps_rules(const TrainConfig& config, int workers) {
  parallel::PsRules r;
  r.workers = workers;
  if (config.strategy == "fedavg") {
    const auto& f = config.fedavg;
    r.federated = parallel::ServerOptimizerOptions{
        .kind = parallel::parse_server_optimizer(f.server_optimizer),
        .lr = static_cast<float>(f.server_lr),
        .momentum = static_cast<float>(f.server_momentum),
        .beta2 = static_cast<float>(f.server_beta2),
        .eps = static_cast<float>(f.server_eps)};
    return r;  // sync rounds, every live worker counts
  }
  r.mode = parallel::parse_ps_mode(config.ps.mode);
  r.backup_workers = static_cast<int>(config.ps.backup_workers);
  r.staleness_bound = static_cast<int>(config.ps.staleness_bound);
  r.staleness_lr = config.ps.staleness_lr;
  return r;
}

}  // namespace braid::train
