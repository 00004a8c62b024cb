// The settings table (see settings.h).
#include "train/settings.h"

#include <limits>

#include "core/error.h"
#include "core/gemm.h"

namespace braid::train {
namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Range kPositive{0, kInf, true, false};
constexpr Range kNonNegative{0, kInf};
constexpr Range kProbability{0, 1};
constexpr Range kBelowOne{0, 1, false, true};

// `field` is a generic lambda returning a reference to the TrainConfig member, so one
// accessor serves both reading (const) and writing.
template <typename Field>
Setting row(std::string key, SettingKind kind, const char* group, std::string help, Field field) {
  Setting s;
  s.key = std::move(key);
  s.kind = kind;
  s.group = group;
  s.help = std::move(help);
  s.get = [field](const TrainConfig& c) { return json(field(c)); };
  s.set = [field](TrainConfig& c, const json& v) {
    auto& f = field(c);
    f = v.get<std::decay_t<decltype(f)>>();
  };
  return s;
}

template <typename Field>
Setting integer(std::string key, const char* group, int64_t lo, int64_t hi, std::string help,
                Field field) {
  Setting s = row(std::move(key), SettingKind::integer, group, std::move(help), field);
  s.int_lo = lo;
  s.int_hi = hi;
  return s;
}

template <typename Field>
Setting number(std::string key, const char* group, Range range, std::string help, Field field) {
  Setting s = row(std::move(key), SettingKind::number, group, std::move(help), field);
  s.range = range;
  return s;
}

template <typename Field>
Setting text(std::string key, const char* group, std::vector<std::string> choices, std::string help,
             Field field) {
  Setting s = row(std::move(key), SettingKind::text, group, std::move(help), field);
  s.choices = std::move(choices);
  return s;
}

// A key that may differ between the ranks of one job (see Setting::per_rank).
Setting per_rank(Setting s) {
  s.per_rank = true;
  return s;
}

Setting with_old_flags(Setting s, std::vector<std::string> old) {
  s.old_flags = std::move(old);
  return s;
}

constexpr const char* kData = "Model and data";
constexpr const char* kRun = "Length and resources";
constexpr const char* kOptimizer = "Optimizer";
constexpr const char* kSchedule = "Learning-rate schedule";
constexpr const char* kRegular = "Regularisation and augmentation";
constexpr const char* kOutput = "Output";
constexpr const char* kParallel = "Distribution (under braid launch, torchrun, mpirun, srun)";

std::vector<Setting> make_settings() {
  using K = SettingKind;
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  std::vector<Setting> t;
  t.push_back(row(
      "model", K::model, kData,
      "a built-in model (mlp, cnn, cnn-bn, gpt-tiny, gpt-small), which brings its training "
      "recipe as defaults, or a model spec: an object with 'input' and 'layers' "
      "(with the flag, a .json file holding one)",
      [](auto& c) -> auto& { return c.model; }));
  t.push_back(text(
      "dataset", kData, {"fashion-mnist", "npy", "text", "image_folder", "csv"},
      "the data to train on", [](auto& c) -> auto& { return c.dataset; }));
  t.push_back(per_rank(text(
      "data_dir", kData, {}, "the Fashion-MNIST directory",
      [](auto& c) -> auto& { return c.data_dir; })));
  t.push_back(per_rank(row(
      "npy", K::text_list, kData,
      "dataset npy: train features, train labels, test features, test labels",
      [](auto& c) -> auto& { return c.npy; })));
  t.push_back(text(
      "npy_layout", kData, {"nchw", "nhwc"},
      "dataset npy: how 4-D features hold images: nchw ([N, C, H, W], PyTorch's order) or nhwc "
      "([N, H, W, C]); either is read into braid's [H, W, C] samples, the model's 'input'",
      [](auto& c) -> auto& { return c.npy_layout; }));
  // Not per_rank: every rank must list the same files, or they would assign them differently.
  t.push_back(row(
      "npy_shards", K::text_list, kData,
      "dataset npy: the training features as many files (paths or globs such as "
      "'train-*.x.npy', in name order), each rank reading only its own: file f goes to rank "
      "f mod world, and every rank's epoch is as long as the largest rank's (the others wrap "
      "around their files); 'npy' then holds only the test features and labels",
      [](auto& c) -> auto& { return c.npy_shards; }));
  t.push_back(row(
      "npy_shard_labels", K::text_list, kData,
      "dataset npy: the labels files of npy_shards (paths or globs), paired with them in order",
      [](auto& c) -> auto& { return c.npy_shard_labels; }));
  t.push_back(text(
      "npy_mmap", kData, {"auto", "on", "off"},
      "dataset npy: memory-map the features files and convert rows as batches are filled, "
      "so data larger than memory trains (on); read them into memory (off); auto maps "
      "sharded data, and files whose f32 copy would take over half of MemAvailable",
      [](auto& c) -> auto& { return c.npy_mmap; }));
  t.push_back(per_rank(row(
      "text_files", K::text_list, kData,
      "dataset text: the files to read (none: the fortunes corpus)",
      [](auto& c) -> auto& { return c.text_files; })));
  t.push_back(per_rank(text(
      "csv_train", kData, {},
      "dataset csv: the training table (.csv, .tsv, either .gz): numeric feature columns and "
      "a label column",
      [](auto& c) -> auto& { return c.csv_train; })));
  t.push_back(per_rank(text(
      "csv_test", kData, {},
      "dataset csv: the test table, read as csv_train is (none: one of csv_test_folds folds "
      "of the training table, shuffled by seed, tests)",
      [](auto& c) -> auto& { return c.csv_test; })));
  t.push_back(text(
      "csv_label", kData, {},
      "dataset csv: the label column: its header name, or an index (0 the first, -1 the last)",
      [](auto& c) -> auto& { return c.csv_label; }));
  t.push_back(integer(
      "csv_skip_rows", kData, 0, 1 << 30,
      "dataset csv: lines passed over before the header (or the first row)",
      [](auto& c) -> auto& { return c.csv_skip_rows; }));
  t.push_back(row(
      "csv_header", K::boolean, kData,
      "dataset csv: the first row names the columns (false: columns are named by index)",
      [](auto& c) -> auto& { return c.csv_header; }));
  t.push_back(text(
      "csv_delimiter", kData, {},
      "dataset csv: the field separator, one character or 'tab' (none: tab for .tsv files, "
      "else a comma)",
      [](auto& c) -> auto& { return c.csv_delimiter; }));
  t.push_back(row(
      "csv_targets", K::text_list, kData,
      "dataset csv with a regression or bce_with_logits loss: the target columns (names, or "
      "indices), read as numbers, one model output each (none: csv_label's column)",
      [](auto& c) -> auto& { return c.csv_targets; }));
  t.push_back(row(
      "csv_standardize", K::boolean, kData,
      "dataset csv: scale each feature to mean 0 and standard deviation 1 by the training "
      "table's statistics (recorded in OUT/data.json)",
      [](auto& c) -> auto& { return c.csv_standardize; }));
  t.push_back(integer(
      "csv_test_folds", kData, 2, 1000,
      "dataset csv without csv_test: the training table is shuffled by seed and cut into "
      "this many folds; the first one tests, the others train",
      [](auto& c) -> auto& { return c.csv_test_folds; }));
  t.push_back(integer(
      "seq_len", kData, 1, 1 << 20, "dataset text: the context length",
      [](auto& c) -> auto& { return c.seq_len; }));
  t.push_back(per_rank(text(
      "image_train", kData, {},
      "dataset image_folder: the training images, a subfolder per class (PNG or JPEG)",
      [](auto& c) -> auto& { return c.image_train; })));
  t.push_back(per_rank(text(
      "image_test", kData, {},
      "dataset image_folder: the test images, with the training folder's class subfolders",
      [](auto& c) -> auto& { return c.image_test; })));
  t.push_back(integer(
      "image_size", kData, 0, 8192,
      "dataset image_folder: the side every image is resized to (0: the first training "
      "image's size)",
      [](auto& c) -> auto& { return c.image_size; }));
  t.push_back(integer(
      "image_channels", kData, 1, 3, "dataset image_folder: 1 (gray) or 3 (RGB)",
      [](auto& c) -> auto& { return c.image_channels; }));
  t.push_back(number(
      "image_mean", kData, kProbability,
      "dataset image_folder: normalisation (x - mean) / std of pixels in [0, 1]",
      [](auto& c) -> auto& { return c.image_mean; }));
  t.push_back(number(
      "image_std", kData, kPositive, "dataset image_folder: see image_mean",
      [](auto& c) -> auto& { return c.image_std; }));

  t.push_back(integer(
      "epochs", kRun, 1, kMaxEpochs, "passes over the training set",
      [](auto& c) -> auto& { return c.epochs; }));
  t.push_back(with_old_flags(
      integer(
          "max_steps", kRun, 0, kMaxSteps, "stop after this many steps (0: no limit)",
          [](auto& c) -> auto& { return c.max_steps; }),
      {"--steps"}));
  t.push_back(integer(
      "batch", kRun, 1, kMaxBatch, "samples per step", [](auto& c) -> auto& { return c.batch; }));
  t.push_back(integer(
      "global_batch", kRun, 0, kMaxBatch,
      "samples per step over all data-parallel ranks, kept whatever their number: each rank "
      "takes its share (22, 21, 21 of 64 on 3 ranks) in place of 'batch', and its gradient "
      "counts by its share (0: batch x ranks)",
      [](auto& c) -> auto& { return c.global_batch; }));
  t.push_back(integer(
      "seed", kRun, 0, kInt64Max, "random seed: initialisation, data order, augmentation, dropout",
      [](auto& c) -> auto& { return c.seed; }));
  t.push_back(per_rank(integer(
      "threads", kRun, 1, kMaxBlasThreads, "BLAS threads (more than the cores slows a step down)",
      [](auto& c) -> auto& { return c.threads; })));
  t.push_back(text(
      "precision", kRun, {"fp32", "bf16", "fp16"},
      "arithmetic of the GEMMs: fp32, or bf16 / fp16 operands with fp32 accumulation (weights, "
      "gradients and the optimizer stay fp32; normalisation, softmax and losses too); fp16 "
      "scales the loss dynamically (fp16.*)",
      [](auto& c) -> auto& { return c.precision; }));
  t.push_back(integer(
      "fp16.initial_scale_power", kRun, 0, 64,
      "fp16: the loss scale starts at 2^this (DeepSpeed's initial_scale_power)",
      [](auto& c) -> auto& { return c.fp16.initial_scale_power; }));
  t.push_back(integer(
      "fp16.loss_scale_window", kRun, 1, kMaxSteps,
      "fp16: steps without an overflow before the scale doubles",
      [](auto& c) -> auto& { return c.fp16.loss_scale_window; }));
  t.push_back(integer(
      "fp16.hysteresis", kRun, 1, 1 << 20,
      "fp16: overflows (since the last growth) before the scale halves",
      [](auto& c) -> auto& { return c.fp16.hysteresis; }));
  t.push_back(per_rank(text(
      "kernel_choices", kRun, {},
      "replay a run's GEMM library and convolution algorithm choices (its output directory "
      "or checkpoint) instead of timing them: bitwise that run's arithmetic (BRAID_GEMM and "
      "BRAID_CONV force one)",
      [](auto& c) -> auto& { return c.kernel_choices; })));

  t.push_back(text(
      "strategy", kParallel,
      {"auto", "single", "ddp", "local_sgd", "ps", "fedavg", "pipeline", "tensor", "mesh"},
      "how ranks share the work (auto: ddp when the job has more than one rank, mesh when "
      "pipeline.stages, tensor_parallel or mesh.* ask for model parallelism; local_sgd: local "
      "steps, parameters averaged every local_sgd.period steps; ps: parameter servers, under "
      "braid launch --servers S --workers W; fedavg: federated averaging; pipeline: the "
      "layers cut into one stage a rank; tensor: the GPT's matrices cut by width across the "
      "ranks; mesh: data x tensor x pipeline)",
      [](auto& c) -> auto& { return c.strategy; }));
  t.push_back(integer(
      "mesh.data", kParallel, 0, 1 << 20,
      "mesh: data-parallel replicas of the model-parallel group (0: the job's ranks / "
      "(tensor x pipeline))",
      [](auto& c) -> auto& { return c.mesh.data; }));
  t.push_back(integer(
      "mesh.tensor", kParallel, 0, 4096,
      "mesh: ranks the GPT is cut across by width (0: tensor_parallel)",
      [](auto& c) -> auto& { return c.mesh.tensor; }));
  t.push_back(integer(
      "mesh.pipeline", kParallel, 0, 4096, "mesh: pipeline stages (0: pipeline.stages)",
      [](auto& c) -> auto& { return c.mesh.pipeline; }));
  t.push_back(integer(
      "tensor_parallel", kParallel, 0, 4096,
      "tensor: ranks the GPT's attention heads, MLP and vocabulary are cut across (the job's "
      "ranks; Megatron-style)",
      [](auto& c) -> auto& { return c.tensor_parallel; }));
  t.push_back(integer(
      "pipeline.stages", kParallel, 0, 4096,
      "pipeline: stages (the job's ranks; 0 with strategy pipeline: every rank a stage)",
      [](auto& c) -> auto& { return c.pipeline.stages; }));
  t.push_back(integer(
      "pipeline.micro_batches", kParallel, 1, 1 << 16,
      "pipeline: micro-batches each rank's batch is cut into, flowing through the stages (M)",
      [](auto& c) -> auto& { return c.pipeline.micro_batches; }));
  t.push_back(text(
      "pipeline.schedule", kParallel, {"gpipe", "1f1b", "interleaved"},
      "pipeline: gpipe (every forward, then every backward: M micro-batches in flight), "
      "1f1b (one forward, one backward: at most stages in flight) or interleaved (1f1b over "
      "pipeline.chunks chunks of layers a stage: the bubble divided by the chunks)",
      [](auto& c) -> auto& { return c.pipeline.schedule; }));
  t.push_back(integer(
      "pipeline.chunks", kParallel, 1, 64,
      "pipeline interleaved: chunks of layers each stage holds (v); micro_batches must be a "
      "multiple of the stages",
      [](auto& c) -> auto& { return c.pipeline.chunks; }));
  t.push_back(row(
      "pipeline.recompute", K::boolean, kParallel,
      "pipeline: keep only each stage's inputs and run its forward again before backward "
      "(activation checkpointing)",
      [](auto& c) -> auto& { return c.pipeline.recompute; }));
  t.push_back(text(
      "plan.cluster_file", kParallel, {},
      "strategy auto: a cluster file; the job runs braid plan's fastest configuration that "
      "fits (needs plan.profile_file)",
      [](auto& c) -> auto& { return c.plan.cluster_file; }));
  t.push_back(text(
      "plan.profile_file", kParallel, {},
      "strategy auto with plan.cluster_file: the model's profile, measured once by braid plan "
      "--profile FILE (every rank reads the same file, so every rank makes the same choice)",
      [](auto& c) -> auto& { return c.plan.profile_file; }));
  t.push_back(integer(
      "local_sgd.period", kParallel, 1, 1 << 20,
      "local_sgd: steps each rank takes alone between two averages of the parameters (H)",
      [](auto& c) -> auto& { return c.local_sgd.period; }));
  t.push_back(integer(
      "local_sgd.start_step", kParallel, 0, int64_t{1} << 40,
      "local_sgd: the step local steps begin at; the ones before are ddp steps (post-local SGD)",
      [](auto& c) -> auto& { return c.local_sgd.start_step; }));
  t.push_back(text(
      "ps.mode", kParallel, {"sync", "async", "ssp"},
      "ps: when servers apply gradients (sync: each step once every worker's arrived; async: "
      "on arrival; ssp: on arrival, no worker more than ps.staleness_bound steps ahead)",
      [](auto& c) -> auto& { return c.ps.mode; }));
  t.push_back(integer(
      "ps.backup_workers", kParallel, 0, 4096,
      "ps sync: a step applies after workers - backup_workers gradients; late ones are dropped",
      [](auto& c) -> auto& { return c.ps.backup_workers; }));
  t.push_back(integer(
      "ps.staleness_bound", kParallel, 0, 1 << 20,
      "ps ssp: steps a worker may run ahead of the slowest live worker (s)",
      [](auto& c) -> auto& { return c.ps.staleness_bound; }));
  t.push_back(row(
      "ps.staleness_lr", K::boolean, kParallel,
      "ps async, ssp: divide a gradient's learning rate by 1 + its staleness",
      [](auto& c) -> auto& { return c.ps.staleness_lr; }));
  t.push_back(number(
      "ps.worker_timeout_s", kParallel, kNonNegative,
      "ps async, ssp: seconds a worker may stay silent before servers count it lost and go on "
      "(0: the job's communication timeout)",
      [](auto& c) -> auto& { return c.ps.worker_timeout_s; }));
  t.push_back(integer(
      "elastic.commit_every", kParallel, 1, 1 << 30,
      "elastic jobs: steps between in-memory commits of the training state; a lost rank "
      "rolls the job back at most this many steps",
      [](auto& c) -> auto& { return c.elastic.commit_every; }));
  t.push_back(row(
      "elastic.scale_lr", K::boolean, kParallel,
      "elastic jobs: when the ranks change, each keeps its 'batch' (a round's global batch is "
      "batch x its ranks; global_batch is not used) and the whole lr schedule is scaled by "
      "ranks / launch ranks (the linear scaling rule). Pick it when a step should keep its cost "
      "while ranks are gone for long; off, the ranks left share the launch's global batch at "
      "its lr, and the run keeps the trajectory of an undisturbed one",
      [](auto& c) -> auto& { return c.elastic.scale_lr; }));
  t.push_back(integer(
      "fedavg.clients", kParallel, 1, 1 << 24, "fedavg: clients the training set is split over (K)",
      [](auto& c) -> auto& { return c.fedavg.clients; }));
  t.push_back(number(
      "fedavg.fraction", kParallel, Range{0, 1, true, false},
      "fedavg: the share of clients that train in each round (C)",
      [](auto& c) -> auto& { return c.fedavg.fraction; }));
  t.push_back(integer(
      "fedavg.local_epochs", kParallel, 1, 1 << 20,
      "fedavg: passes of each chosen client over its shard per round (E)",
      [](auto& c) -> auto& { return c.fedavg.local_epochs; }));
  t.push_back(integer(
      "fedavg.rounds", kParallel, 0, kMaxSteps,
      "fedavg: rounds to run (0: enough for `epochs` passes over the training set)",
      [](auto& c) -> auto& { return c.fedavg.rounds; }));
  t.push_back(text(
      "fedavg.split", kParallel, {"iid", "dirichlet", "labels_per_client"},
      "fedavg: how the training set is split over the clients",
      [](auto& c) -> auto& { return c.fedavg.split; }));
  t.push_back(number(
      "fedavg.alpha", kParallel, kPositive,
      "fedavg split dirichlet: the concentration (small: each client holds few labels)",
      [](auto& c) -> auto& { return c.fedavg.alpha; }));
  t.push_back(integer(
      "fedavg.labels_per_client", kParallel, 1, 1 << 20,
      "fedavg split labels_per_client: the distinct labels each client holds (k)",
      [](auto& c) -> auto& { return c.fedavg.labels_per_client; }));
  t.push_back(number(
      "fedavg.prox_mu", kParallel, kNonNegative,
      "fedavg: FedProx's proximal weight mu (0: plain FedAvg)",
      [](auto& c) -> auto& { return c.fedavg.prox_mu; }));
  t.push_back(text(
      "fedavg.server_optimizer", kParallel, {"avg", "avgm", "adam"},
      "fedavg: the server's update from the clients' mean change (avg: apply it; avgm: with "
      "momentum; adam: FedAdam)",
      [](auto& c) -> auto& { return c.fedavg.server_optimizer; }));
  t.push_back(number(
      "fedavg.server_lr", kParallel, kPositive, "fedavg: the server's learning rate",
      [](auto& c) -> auto& { return c.fedavg.server_lr; }));
  t.push_back(number(
      "fedavg.server_momentum", kParallel, kBelowOne,
      "fedavg server avgm: momentum; adam: the first-moment decay",
      [](auto& c) -> auto& { return c.fedavg.server_momentum; }));
  t.push_back(number(
      "fedavg.server_beta2", kParallel, kBelowOne, "fedavg server adam: the second-moment decay",
      [](auto& c) -> auto& { return c.fedavg.server_beta2; }));
  t.push_back(number(
      "fedavg.server_eps", kParallel, kPositive,
      "fedavg server adam: the denominator's epsilon (tau)",
      [](auto& c) -> auto& { return c.fedavg.server_eps; }));
  t.push_back(text(
      "comm_dtype", kParallel, {"fp32", "bf16", "fp16"},
      "ddp: the gradients' type on the wire (bf16, fp16: half the bytes; each addition in "
      "fp32, rounded back)",
      [](auto& c) -> auto& { return c.comm_dtype; }));
  t.push_back(text(
      "compression.codec", kParallel,
      {"none", "bf16", "fp16", "int8", "sign", "topk", "powersgd", "onebit_adam"},
      "ddp, zero_stage, local_sgd: how gradient buckets cross the wire: none (fp32); bf16, fp16 "
      "(half the bytes); int8 (a quarter, a scale per chunk); sign (1 bit, error feedback); topk "
      "(Deep Gradient Compression); powersgd (rank-r factors, error feedback); onebit_adam (Adam "
      "whose momentum crosses as 1 bit after compression.freeze_step; optimizer onebit_adam)",
      [](auto& c) -> auto& { return c.compression.codec; }));
  t.push_back(integer(
      "compression.int8_chunk", kParallel, 1, int64_t{1} << 30, "int8: floats sharing one scale",
      [](auto& c) -> auto& { return c.compression.int8_chunk; }));
  t.push_back(integer(
      "compression.sign_chunk", kParallel, 32, int64_t{1} << 30,
      "sign: floats sharing one scale (a multiple of 32)",
      [](auto& c) -> auto& { return c.compression.sign_chunk; }));
  t.push_back(row(
      "compression.stochastic_rounding", K::boolean, kParallel,
      "int8: unbiased stochastic rounding instead of round to nearest",
      [](auto& c) -> auto& { return c.compression.stochastic_rounding; }));
  t.push_back(number(
      "compression.topk_ratio", kParallel, Range{0, 1, false, false},
      "topk: the fraction of each bucket's entries sent per step",
      [](auto& c) -> auto& { return c.compression.topk_ratio; }));
  t.push_back(number(
      "compression.topk_momentum", kParallel, kBelowOne,
      "topk: momentum kept in the codec (DGC's momentum correction; the optimizer then runs "
      "with momentum 0)",
      [](auto& c) -> auto& { return c.compression.topk_momentum; }));
  t.push_back(integer(
      "compression.topk_warmup_steps", kParallel, 0, int64_t{1} << 40,
      "topk: steps over which the kept fraction falls from 25 % to topk_ratio (DGC's warm-up)",
      [](auto& c) -> auto& { return c.compression.topk_warmup_steps; }));
  t.push_back(integer(
      "compression.powersgd_rank", kParallel, 1, 1024,
      "powersgd: the rank r of the low-rank factors",
      [](auto& c) -> auto& { return c.compression.powersgd_rank; }));
  t.push_back(integer(
      "compression.start_iter", kParallel, 0, int64_t{1} << 40,
      "powersgd: plain fp32 steps before compression starts",
      [](auto& c) -> auto& { return c.compression.start_iter; }));
  t.push_back(number(
      "compression.min_compression_rate", kParallel, kNonNegative,
      "powersgd: a matrix compressing less than this ((rows x cols) / ((rows + cols) r)) goes "
      "uncompressed",
      [](auto& c) -> auto& { return c.compression.min_compression_rate; }));
  t.push_back(integer(
      "compression.freeze_step", kParallel, 1, int64_t{1} << 40,
      "onebit_adam: steps of plain Adam (and fp32 gradients) before the variance freezes",
      [](auto& c) -> auto& { return c.compression.freeze_step; }));
  t.push_back(row(
      "scheduler.priority", K::boolean, kParallel,
      "ddp: send gradient buckets in pieces, the input side's first among those every rank has "
      "ready, and update each bucket in the next forward just before its layers; ps, fedavg: "
      "pull the servers' ranges in layer order within a credit (ByteScheduler)",
      [](auto& c) -> auto& { return c.scheduler.priority; }));
  t.push_back(number(
      "scheduler.partition_mb", kParallel, Range{0, 1 << 20},
      "scheduler.priority: MiB of gradients per piece (0, the default: tuned on the first "
      "steps, among the largest bucket / 1, 4 and 16); ps: MiB of ranges a pull requests "
      "ahead of their arrival (0: tuned on the first steps, among every range at once, a "
      "quarter of the bytes and one range at a time)",
      [](auto& c) -> auto& { return c.scheduler.partition_mb; }));
  // From about a KiB (a bucket of 256 floats) to a TiB: converted to bytes as a size_t, so
  // neither end may round to 0 or overflow.
  t.push_back(number(
      "bucket_mb", kParallel, Range{0.001, 1 << 20},
      "ddp: MiB of gradients per allreduce bucket (the first is 1 MiB, as PyTorch's, or less)",
      [](auto& c) -> auto& { return c.bucket_mb; }));
  t.push_back(integer(
      "zero_stage", kParallel, 0, 3,
      "ddp: 1 keeps each rank's range of the optimizer state only (ZeRO stage 1: gradients "
      "reduce-scattered, parameters all-gathered), 2 of the gradients too, 3 of the parameters "
      "too (gathered a bucket at a time for forward and backward); 0 replicates them",
      [](auto& c) -> auto& { return c.zero_stage; }));
  t.push_back(per_rank(number(
      "slow_step_ms", kParallel, kNonNegative,
      "benchmarks: sleep this long after each step on this rank (a straggler; set per rank)",
      [](auto& c) -> auto& { return c.slow_step_ms; })));
  t.push_back(per_rank(row(
      "slow_step_random", K::boolean, kParallel,
      "benchmarks: sleep a uniform random [0, 2 slow_step_ms) after each step instead (the same "
      "mean, a slowness that comes and goes)",
      [](auto& c) -> auto& { return c.slow_step_random; })));
  t.push_back(integer(
      "accumulate_steps", kParallel, 1, 1 << 20,
      "micro-batches per step: batch is cut into this many, gradients added before one update",
      [](auto& c) -> auto& { return c.accumulate_steps; }));
  t.push_back(row(
      "deterministic", K::boolean, kParallel,
      "sum every reduction in rank order: N ranks equal 1 rank with accumulate_steps N, bitwise",
      [](auto& c) -> auto& { return c.deterministic; }));
  t.push_back(row(
      "sync_batchnorm", K::boolean, kParallel,
      "ddp: batch-norm statistics over the global batch (SyncBatchNorm)",
      [](auto& c) -> auto& { return c.sync_batchnorm; }));

  t.push_back(text(
      "optimizer.name", kOptimizer,
      {"sgd", "adam", "adamw", "rmsprop", "adagrad", "lars", "lamb", "onebit_adam"},
      "the optimizer (onebit_adam: with compression.codec onebit_adam; its weight decay is "
      "AdamW's, decoupled)",
      [](auto& c) -> auto& { return c.optimizer.name; }));
  t.push_back(number(
      "optimizer.lr", kOptimizer, kPositive, "learning rate (the peak, after any warm-up)",
      [](auto& c) -> auto& { return c.optimizer.lr; }));
  t.push_back(number(
      "optimizer.momentum", kOptimizer, kNonNegative, "momentum (sgd, rmsprop, lars)",
      [](auto& c) -> auto& { return c.optimizer.momentum; }));
  t.push_back(row(
      "optimizer.nesterov", K::boolean, kOptimizer, "Nesterov momentum (sgd)",
      [](auto& c) -> auto& { return c.optimizer.nesterov; }));
  t.push_back(number(
      "optimizer.weight_decay", kOptimizer, kNonNegative, "weight decay",
      [](auto& c) -> auto& { return c.optimizer.weight_decay; }));
  t.push_back(number(
      "optimizer.beta1", kOptimizer, kBelowOne, "first-moment decay (adam, adamw, lamb)",
      [](auto& c) -> auto& { return c.optimizer.beta1; }));
  t.push_back(number(
      "optimizer.beta2", kOptimizer, kBelowOne, "second-moment decay (adam, adamw, lamb)",
      [](auto& c) -> auto& { return c.optimizer.beta2; }));
  t.push_back(number(
      "optimizer.eps", kOptimizer, kNonNegative,
      "the denominator's epsilon (0: the optimizer's own default)",
      [](auto& c) -> auto& { return c.optimizer.eps; }));
  t.push_back(number(
      "optimizer.alpha", kOptimizer, kProbability, "rmsprop smoothing",
      [](auto& c) -> auto& { return c.optimizer.alpha; }));
  t.push_back(number(
      "optimizer.trust_coefficient", kOptimizer, kNonNegative, "LARS trust coefficient (eta)",
      [](auto& c) -> auto& { return c.optimizer.trust_coefficient; }));
  t.push_back(text(
      "optimizer.lamb_form", kOptimizer, {"paper", "deepspeed"},
      "lamb: paper (You et al. 2019, Algorithm 2: biases and norms unadapted) or deepspeed "
      "(DeepSpeed's FusedLamb: every tensor adapted, the bias correction in the step)",
      [](auto& c) -> auto& { return c.optimizer.lamb_form; }));
  t.push_back(number(
      "optimizer.min_trust", kOptimizer, kNonNegative,
      "lamb: the trust ratio's lower bound (DeepSpeed's min_coeff)",
      [](auto& c) -> auto& { return c.optimizer.min_trust; }));
  t.push_back(number(
      "optimizer.max_trust", kOptimizer, kNonNegative,
      "lamb: the trust ratio's upper bound (DeepSpeed's max_coeff; 0: none)",
      [](auto& c) -> auto& { return c.optimizer.max_trust; }));
  t.push_back(row(
      "optimizer.bias_correction", K::boolean, kOptimizer,
      "lamb: divide the moments by 1 - beta^t (false: DeepSpeed's bias_correction false)",
      [](auto& c) -> auto& { return c.optimizer.bias_correction; }));
  t.push_back(integer(
      "optimizer.base_batch", kOptimizer, 0, kMaxBatch,
      "> 0: scale the learning rate by batch / base_batch (linear scaling)",
      [](auto& c) -> auto& { return c.optimizer.base_batch; }));

  t.push_back(text(
      "schedule.name", kSchedule, {"constant", "step", "cosine", "linear", "warmup_cosine"},
      "the learning-rate schedule: constant; step (x gamma every step_size steps); cosine "
      "(from lr at step 0 to min_lr at the run's end); linear (from lr at the warm-up's end to "
      "min_lr at total_steps); warmup_cosine (a cosine from the warm-up's end to lr x min_ratio "
      "on step total_steps - 1)",
      [](auto& c) -> auto& { return c.schedule.name; }));
  t.push_back(with_old_flags(integer(
                                 "schedule.warmup_steps", kSchedule, 0, kMaxSteps,
                                 "warm-up steps (schedule.warmup_type says how)",
                                 [](auto& c) -> auto& { return c.schedule.warmup_steps; }),
                             {"--warmup"}));
  t.push_back(text(
      "schedule.warmup_type", kSchedule, {"factor", "linear", "log"},
      "the warm-up over W = warmup_steps: factor (the schedule's lr x (s+1)/W at step s); "
      "linear (from lr x warmup_start_ratio, + s/W of the way to the schedule's lr); log (the "
      "same with ln(s+1)/ln(W), W >= 2): DeepSpeed's WarmupLR ramps",
      [](auto& c) -> auto& { return c.schedule.warmup_type; }));
  t.push_back(number(
      "schedule.warmup_start_ratio", kSchedule, kProbability,
      "warmup_type linear, log: the first step's lr as a fraction of lr",
      [](auto& c) -> auto& { return c.schedule.warmup_start_ratio; }));
  t.push_back(integer(
      "schedule.total_steps", kSchedule, 0, kMaxSteps,
      "schedule cosine, linear, warmup_cosine: the step the decay ends at (0: the run's length)",
      [](auto& c) -> auto& { return c.schedule.total_steps; }));
  t.push_back(integer(
      "schedule.step_size", kSchedule, 1, kMaxSteps, "schedule step: steps between decays",
      [](auto& c) -> auto& { return c.schedule.step_size; }));
  t.push_back(number(
      "schedule.gamma", kSchedule, kNonNegative, "schedule step: the factor of each decay",
      [](auto& c) -> auto& { return c.schedule.gamma; }));
  t.push_back(number(
      "schedule.min_lr", kSchedule, kNonNegative,
      "schedule cosine, linear: the final learning rate",
      [](auto& c) -> auto& { return c.schedule.min_lr; }));
  t.push_back(number(
      "schedule.min_ratio", kSchedule, kProbability,
      "schedule warmup_cosine: the floor, as a fraction of lr",
      [](auto& c) -> auto& { return c.schedule.min_ratio; }));
  t.push_back(integer(
      "schedule.lag_steps", kSchedule, 0, kMaxSteps,
      "run the whole schedule this many steps late, its first lr repeated (1: a scheduler "
      "stepped after each optimizer step, as DeepSpeed's)",
      [](auto& c) -> auto& { return c.schedule.lag_steps; }));

  t.push_back(with_old_flags(
      number(
          "clip_grad_norm", kRegular, kNonNegative, "clip gradients to this global norm (0: off)",
          [](auto& c) -> auto& { return c.clip_grad_norm; }),
      {"--clip"}));
  t.push_back(with_old_flags(row(
                                 "augment_flip", K::boolean, kRegular, "random horizontal flips",
                                 [](auto& c) -> auto& { return c.augment_flip; }),
                             {"--flip"}));
  t.push_back(with_old_flags(
      integer(
          "augment_crop_pad", kRegular, 0, 1024, "pad by N and crop back at a random offset",
          [](auto& c) -> auto& { return c.augment_crop_pad; }),
      {"--crop-pad"}));
  t.push_back(with_old_flags(number(
                                 "augment_erase", kRegular, kProbability,
                                 "probability of random erasing (a box set to the mean)",
                                 [](auto& c) -> auto& { return c.augment_erase; }),
                             {"--erase"}));
  t.push_back(number(
      "label_smoothing", kRegular, kBelowOne,
      "cross-entropy against (1 - eps) onehot + eps / classes (loss cross_entropy only)",
      [](auto& c) -> auto& { return c.label_smoothing; }));
  t.push_back(text(
      "loss", kRegular, {"cross_entropy", "mse", "l1", "huber", "bce_with_logits"},
      "the training loss: cross_entropy on class labels; mse, l1 or huber on numeric targets "
      "(regression, evaluated by MSE and MAE); bce_with_logits on 0/1 targets, one per output "
      "(multi-label, evaluated by per-label accuracy)",
      [](auto& c) -> auto& { return c.loss; }));
  Setting weights = row(
      "loss_class_weights", K::number_list, kRegular,
      "cross_entropy: a weight per class, as PyTorch's weight= (the mean weighs each sample by "
      "its class's; none: all 1)",
      [](auto& c) -> auto& { return c.loss_class_weights; });
  weights.range = kNonNegative;
  t.push_back(weights);
  t.push_back(number(
      "huber_delta", kRegular, kPositive,
      "loss huber: the error size where the loss turns from quadratic to linear",
      [](auto& c) -> auto& { return c.huber_delta; }));
  t.push_back(number(
      "ema_decay", kRegular, kBelowOne,
      "> 0: also evaluate an exponential moving average of the weights "
      "(0.999 is typical)",
      [](auto& c) -> auto& { return c.ema_decay; }));

  t.push_back(number(
      "stop.target", kOutput, kNonNegative,
      "> 0: stop once an evaluation's stop.metric reaches this (accuracy at least, loss at most)",
      [](auto& c) -> auto& { return c.stop.target; }));
  t.push_back(text(
      "stop.metric", kOutput, {"auto", "accuracy", "loss", "mse", "mae"},
      "the evaluation metric stop.target and stop.patience watch (auto: accuracy for "
      "classification, else loss; mse and mae for a regression loss)",
      [](auto& c) -> auto& { return c.stop.metric; }));
  t.push_back(integer(
      "stop.patience", kOutput, 0, kMaxSteps,
      "> 0: stop after this many evaluations in a row without a better stop.metric",
      [](auto& c) -> auto& { return c.stop.patience; }));
  t.push_back(number(
      "stop.min_rel_change", kOutput, kNonNegative,
      "> 0: stop when the evaluation loss changes by less than this fraction of the previous",
      [](auto& c) -> auto& { return c.stop.min_rel_change; }));
  t.push_back(per_rank(text(
      "out", kOutput, {}, "output directory (config.json, metrics.jsonl, checkpoint/)",
      [](auto& c) -> auto& { return c.out; })));
  t.push_back(per_rank(text(
      "timeline", kOutput, {},
      "write a Chrome trace of every rank's steps here (open in Perfetto or chrome://tracing)",
      [](auto& c) -> auto& { return c.timeline; })));
  t.push_back(per_rank(integer(
      "log_every", kOutput, 1, kMaxSteps, "steps between progress lines",
      [](auto& c) -> auto& { return c.log_every; })));
  t.push_back(integer(
      "eval_every", kOutput, 0, kMaxSteps, "steps between evaluations (0: after each epoch)",
      [](auto& c) -> auto& { return c.eval_every; }));
  t.push_back(integer(
      "eval_batches", kOutput, 0, kMaxSteps,
      "batches per evaluation (0: the whole evaluation split)",
      [](auto& c) -> auto& { return c.eval_batches; }));
  t.push_back(integer(
      "checkpoint_every", kOutput, 0, kMaxSteps, "steps between checkpoints (0: after each epoch)",
      [](auto& c) -> auto& { return c.checkpoint_every; }));
  return t;
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = make_settings();
  return table;
}

}  // namespace braid::train
