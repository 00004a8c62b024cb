#include "train/strategy_setup.h"

#include <algorithm>
#include <cmath>

#include "comm/group.h"
#include "parallel/ddp.h"
#include "parallel/local_sgd.h"
#include "parallel/mesh_strategy.h"
#include "parallel/ps_evaluator.h"
#include "parallel/ps_push_codec.h"
#include "parallel/ps_worker.h"
#include "parallel/single_process.h"
#include "parallel/zero.h"
#include "train/data_setup.h"
#include "train/loss_setup.h"

namespace braid::train {

parallel::StepOptions step_options(const TrainConfig& config) {
  parallel::StepOptions o;
  o.optimizer = config.optimizer;
  // onebit_adam's codec and optimizer switch at the same step: one knob for both.
  o.optimizer.freeze_step = config.compression.freeze_step;
  o.clip_grad_norm = static_cast<float>(config.clip_grad_norm);
  o.label_smoothing = static_cast<float>(config.label_smoothing);
  o.loss = make_train_loss(config);
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

namespace {

// global_batch over `data_world` data-parallel ranks: every rank needs a sample of each
// step, uneven shares need a strategy that weighs gradients by share (ddp, its ZeRO stages,
// local_sgd), and accumulation must cut every share evenly.
void check_global_batch(const TrainConfig& config, const std::string& name, int data_world) {
  const int64_t G = config.global_batch;
  BRAID_CHECK(name != "fedavg", "global_batch: strategy fedavg trains each client at 'batch' ",
              "and weighs clients by their samples; drop global_batch");
  BRAID_CHECK(G >= data_world, "global_batch ", G, " cannot give each of ", data_world,
              " data-parallel ranks a sample of every step; set it to at least ", data_world);
  const int64_t low = G / data_world, high = low + (G % data_world != 0 ? 1 : 0);
  BRAID_CHECK(low == high || name == "ddp" || name == "local_sgd", "global_batch ", G, " over ",
              data_world, " data-parallel ranks gives uneven shares (", high, " and ", low,
              " samples), which only strategies ddp (and its zero_stage) and local_sgd "
              "weigh; use a multiple of ",
              data_world, " or one of those strategies");
  const int64_t m = config.accumulate_steps;
  BRAID_CHECK(low % m == 0 && high % m == 0, "global_batch ", G, " over ", data_world,
              " data-parallel ranks gives shares of ", high,
              low == high ? "" : detail::concat(" and ", low), " samples, which accumulate_steps ",
              m, " does not cut into equal micro-batches; choose a global_batch whose shares ",
              "it divides, or another accumulate_steps");
}

// scheduler.partition_mb in bytes: 0 stays 0, anything else is at least a float.
size_t partition_bytes(const TrainConfig& config) {
  const double mb = config.scheduler.partition_mb;
  return mb > 0 ? std::max<size_t>(4, static_cast<size_t>(mb * (1 << 20))) : 0;
}

}  // namespace

parallel::CodecConfig codec_config(const TrainConfig& config) {
  const TrainConfig::Compression& c = config.compression;
  parallel::CodecConfig out;
  out.name = c.codec;
  if (config.comm_dtype != "fp32") {
    BRAID_CHECK(c.codec == "none" || c.codec == config.comm_dtype, "comm_dtype ", config.comm_dtype,
                " and compression.codec ", c.codec,
                " both say how gradients cross the wire; keep compression.codec only");
    out.name = config.comm_dtype;
  }
  out.int8_chunk = c.int8_chunk;
  out.sign_chunk = c.sign_chunk;
  out.stochastic_rounding = c.stochastic_rounding;
  out.seed = config.seed;
  out.topk_ratio = c.topk_ratio;
  out.topk_momentum = static_cast<float>(c.topk_momentum);
  out.clip_norm = out.name == "topk" ? static_cast<float>(config.clip_grad_norm) : 0.0f;
  out.warmup_steps = c.topk_warmup_steps;
  out.powersgd_rank = static_cast<int>(c.powersgd_rank);
  out.start_iter = c.start_iter;
  out.min_compression_rate = c.min_compression_rate;
  out.freeze_step = c.freeze_step;
  out.beta1 = static_cast<float>(config.optimizer.beta1);
  out.beta2 = static_cast<float>(config.optimizer.beta2);
  if (config.optimizer.eps != 0) out.eps = static_cast<float>(config.optimizer.eps);
  const std::string& opt = config.optimizer.name;
  BRAID_CHECK(out.name != "topk" || c.topk_momentum == 0 || config.optimizer.momentum == 0 ||
                  (opt != "sgd" && opt != "rmsprop" && opt != "lars"),
              "compression.codec topk keeps the momentum itself (Deep Gradient Compression's "
              "momentum correction, compression.topk_momentum ",
              c.topk_momentum, "), so optimizer ", opt, " must not add its own; set ",
              "optimizer.momentum 0, or compression.topk_momentum 0");
  return out;
}

std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer(
    const TrainConfig& config, const std::shared_ptr<comm::Group>& group) {
  if (!config.sync_batchnorm || !group || group->size() == 1) return nullptr;
  return std::make_shared<parallel::GroupStatsReducer>(group);
}

std::string check_strategy(const TrainConfig& config, int world,
                           const std::optional<parallel::PsLayout>& ps) {
  std::string name = config.strategy;
  if (name == "auto")
    name = ps ? "ps" : mesh_shape(config, world) ? "mesh" : world > 1 ? "ddp" : "single";
  BRAID_CHECK(!ps || name == "ps" || name == "fedavg", "strategy '", name,
              "' runs in a job of equal ranks, but this is a parameter-server job (",
              ps ? ps->workers : 0, " workers, ", ps ? ps->servers : 0,
              " servers); use strategy ps, or launch with -n N instead of --servers/--workers");
  const bool model_parallel = name == "pipeline" || name == "tensor" || name == "mesh";
  // Their last stage ends in the built-in (vocabulary-parallel) cross-entropy, and fedavg
  // splits its clients by class label: neither takes another loss.
  BRAID_CHECK(!make_train_loss(config) || !(model_parallel || name == "fedavg"), "strategy '", name,
              "' trains with the built-in cross-entropy only, not loss ", config.loss,
              config.loss_class_weights.empty() ? "" : " with loss_class_weights",
              "; use strategy single, ddp (and its zero_stage), local_sgd or ps");
  const std::string codec = codec_config(config).name;
  const bool data_axis =
      name == "ddp" || name == "local_sgd" || name == "ps" || name == "fedavg" ||
      (model_parallel && mesh_shape(config, world) && mesh_shape(config, world)->data > 1);
  BRAID_CHECK(codec == "none" || data_axis, "compression.codec ", codec,
              " compresses what crosses a data-parallel axis: strategies ddp (and its "
              "zero_stage), local_sgd, a mesh with a data axis (mesh.data > 1), and the "
              "pushes of ps and fedavg, not '",
              name, "' here; drop compression.codec (and comm_dtype)");
  BRAID_CHECK(!config.scheduler.priority || name == "ddp" || name == "ps" || name == "fedavg",
              "scheduler.priority orders the gradient exchange of strategies ddp, ps and fedavg, "
              "not '",
              name, "'; drop scheduler.priority");
  BRAID_CHECK((codec == "onebit_adam") == (config.optimizer.name == "onebit_adam"),
              "compression.codec onebit_adam and optimizer onebit_adam work as a pair (the codec "
              "sends Adam's momentum, the optimizer takes it as its own): set both or neither "
              "(now: codec ",
              codec, ", optimizer ", config.optimizer.name, ")");
  BRAID_CHECK(codec != "onebit_adam" || (name == "ddp" && config.zero_stage == 0),
              "compression.codec onebit_adam runs under strategy ddp without zero_stage: its "
              "codec follows Adam's moments over whole buckets, which a sharded optimizer (ZeRO), "
              "local SGD's model averages or a mesh do not give it (now: strategy ",
              name, ", zero_stage ", config.zero_stage, ")");
  BRAID_CHECK(codec != "onebit_adam" || (config.clip_grad_norm == 0 && config.precision != "fp16"),
              "compression.codec onebit_adam hands the optimizer the averaged momentum, which "
              "clip_grad_norm would clip as a gradient and fp16's skipped steps would leave "
              "behind the codec's copy; drop clip_grad_norm and use precision fp32 or bf16");
  if (config.global_batch > 0)
    check_global_batch(config, name,
                       ps               ? ps->workers
                       : model_parallel ? mesh_shape(config, world)->data
                                        : world);
  if (name == "ps" || name == "fedavg") {
    BRAID_CHECK(ps, "strategy '", name,
                "' runs in a parameter-server job: start it with braid launch --servers S "
                "--workers W (or TF_CONFIG, DMLC_* variables, --cluster)");
    BRAID_CHECK(!config.sync_batchnorm,
                "sync_batchnorm needs every rank's batch statistics at each layer; parameter-"
                "server workers do not talk during a step: drop sync_batchnorm");
    BRAID_CHECK(config.clip_grad_norm == 0 || name == "fedavg",
                "clip_grad_norm clips by the norm of the whole gradient, which no parameter "
                "server sees (each holds a range): drop clip_grad_norm under strategy ps");
    parallel::validate(ps_rules(config, ps->workers));
    // A push encoding refuses what a parameter server cannot honour, saying why.
    parallel::make_push_encoder(codec_config(config));
    return name;
  }
  BRAID_CHECK(model_parallel ||
                  (config.pipeline.stages <= 1 && config.tensor_parallel <= 1 &&
                   config.mesh.data == 0 && config.mesh.tensor <= 1 && config.mesh.pipeline <= 1),
              "pipeline.stages, tensor_parallel and mesh.* cut the model across ranks, which "
              "strategy '",
              name, "' does not; use strategy pipeline, tensor or mesh (or auto)");
  BRAID_CHECK(config.precision != "fp16" || name == "single" || name == "ddp" || model_parallel,
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
    return name;
  }
  if (name == "ddp" || name == "local_sgd") {
    BRAID_CHECK(!config.scheduler.priority ||
                    (name == "ddp" && config.zero_stage == 0 &&
                     codec_config(config).name == "none" && !config.sync_batchnorm),
                "scheduler.priority is built for strategy ddp with fp32 gradients (no zero_stage, "
                "compression.codec, comm_dtype or sync_batchnorm); drop scheduler.priority or "
                "those");
    BRAID_CHECK(config.zero_stage < 3 || config.ema_decay == 0,
                "ema_decay keeps an average "
                "of the whole parameters, which no rank holds under zero_stage 3; use "
                "zero_stage 2 or drop ema_decay");
    return name;
  }
  if (model_parallel) {
    BRAID_CHECK(!config.sync_batchnorm,
                "sync_batchnorm shares statistics between data-parallel "
                "ranks holding the whole model; drop it under strategy ",
                name);
    BRAID_CHECK(config.ema_decay == 0,
                "ema_decay averages the whole parameters every step, "
                "which no rank holds under strategy ",
                name, "; drop ema_decay");
    BRAID_CHECK(config.zero_stage == 0,
                "zero_stage along the mesh's data axis is not built "
                "yet; drop zero_stage under strategy ",
                name);
    const parallel::MeshShape shape = *mesh_shape(config, world);
    if (shape.pipeline > 1) {
      // Each replica's batch is cut into M equal micro-batches (parallel/micro_batches.h).
      // A global batch is shared equally on a mesh (check_global_batch).
      const int64_t m = config.pipeline.micro_batches, b = train_batch(config, 0, shape.data);
      int64_t divisor = std::min(m, b);
      while (b % divisor != 0) --divisor;
      BRAID_CHECK(b % m == 0, "pipeline.micro_batches is ", m, " but batch is ", b,
                  ": a pipeline cuts each rank's batch into pipeline.micro_batches equal "
                  "micro-batches, so batch must be a multiple of it; set batch to ",
                  (b + m - 1) / m * m, " (or another multiple of ", m,
                  ") or pipeline.micro_batches to ", divisor, " (or another divisor of ", b, ")");
    }
    return name;
  }
  BRAID_THROW(Error, "unknown strategy '", name,
              "'; choose auto, single, ddp, local_sgd, ps, fedavg, pipeline, tensor or mesh");
}

std::unique_ptr<parallel::Strategy> make_strategy(
    const TrainConfig& config, std::unique_ptr<nn::Module> module,
    std::shared_ptr<comm::Group> group,
    std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer,
    std::optional<parallel::PsLayout> ps) {
  const int world = group ? group->size() : 1;
  const std::string name = check_strategy(config, world, ps);
  if (name == "ps" || name == "fedavg") {
    // Federated averaging's workers pull the global model and push their clients' changes
    // through the same parameter-server exchange (train/trainer_fedavg.cpp drives it).
    BRAID_CHECK(group, "strategy '", name,
                "' runs in a parameter-server job: start it with braid launch --servers S "
                "--workers W (or TF_CONFIG, DMLC_* variables, --cluster)");
    if (ps->is_evaluator(group->rank()))
      return std::make_unique<parallel::PsEvaluator>(std::move(module), step_options(config),
                                                     std::move(group), *ps);
    auto worker = std::make_unique<parallel::PsWorker>(std::move(module), step_options(config),
                                                       std::move(group), *ps, codec_config(config));
    // Priority: pulls within a credit of scheduler.partition_mb (0: tuned at run time).
    if (config.scheduler.priority && partition_bytes(config) == 0) worker->tune_pull_credit();
    if (config.scheduler.priority && partition_bytes(config) > 0)
      worker->set_pull_credit(partition_bytes(config));
    return worker;
  }
  if (name == "single")
    return std::make_unique<parallel::SingleProcess>(std::move(module), step_options(config));
  if (name == "ddp" || name == "local_sgd") {
    BRAID_CHECK(group, "strategy '", name,
                "' needs a job: run it under braid launch -n N (or torchrun, mpirun, srun)");
    parallel::DdpOptions d;
    d.bucket_bytes = static_cast<size_t>(config.bucket_mb * (1 << 20));
    d.batchnorm_reducer = std::move(batchnorm_reducer);
    d.global_batch = config.global_batch;
    d.codec = codec_config(config);
    d.priority = config.scheduler.priority;
    d.partition_bytes = partition_bytes(config);  // 0: tuned at run time (partition_tuner.h)
    if (name == "ddp" && config.zero_stage > 0) {
      parallel::ZeroOptions z;
      static_cast<parallel::DataParallelOptions&>(z) = d;
      z.stage = static_cast<int>(config.zero_stage);
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
  BRAID_CHECK(group, "strategy ", name,
              " needs a job of the ranks that share the model: run it under braid launch -n N "
              "(or torchrun, mpirun, srun)");
  const parallel::MeshShape shape = *mesh_shape(config, world);
  parallel::PipelineOptions p;
  // One stage: the micro-batches are plain accumulation's.
  p.micro_batches = static_cast<int>(shape.pipeline > 1 ? config.pipeline.micro_batches
                                                        : config.accumulate_steps);
  p.schedule = parallel::parse_pipeline_schedule(config.pipeline.schedule);
  if (p.schedule == parallel::PipelineSchedule::interleaved)
    p.chunks = static_cast<int>(config.pipeline.chunks);
  p.recompute = config.pipeline.recompute;
  p.data_bucket_bytes = static_cast<size_t>(config.bucket_mb * (1 << 20));
  p.data_codec = codec_config(config);
  parallel::StepOptions o = step_options(config);
  if (shape.pipeline == 1) o.accumulate_steps = 1;
  return std::make_unique<parallel::MeshStrategy>(std::move(module), o, std::move(group), shape, p);
}

std::optional<parallel::MeshShape> mesh_shape(const TrainConfig& config, int world) {
  const std::string& name = config.strategy;
  auto pick = [](int64_t a, int64_t b, int64_t whole) { return a > 0 ? a : b > 0 ? b : whole; };
  const int64_t T = pick(config.mesh.tensor, config.tensor_parallel, name == "tensor" ? world : 1);
  const int64_t P =
      pick(config.mesh.pipeline, config.pipeline.stages, name == "pipeline" ? world : 1);
  const bool asked = name == "pipeline" || name == "tensor" || name == "mesh" || T > 1 || P > 1 ||
                     config.mesh.data > 0;
  if (!asked) return std::nullopt;
  BRAID_CHECK(world % (T * P) == 0, "pipeline.stages is ", P, " and tensor_parallel ", T,
              " but the job has ", world,
              " ranks; the data axis takes the rest, so launch a "
              "multiple of ",
              T * P, " ranks (launch -n ", T * P, ")");
  const int64_t D = config.mesh.data > 0 ? config.mesh.data : world / (T * P);
  BRAID_CHECK(D * T * P == world, "mesh: ", D, " data x ", T, " tensor x ", P,
              " pipeline = ", D * T * P, " ranks, but the job has ", world);
  return parallel::MeshShape{
      .data = static_cast<int>(D), .tensor = static_cast<int>(T), .pipeline = static_cast<int>(P)};
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
