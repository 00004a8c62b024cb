// TrainConfig: everything a training run needs, read from a JSON file and/or CLI flags
// (flags override the file). A built-in model brings its recipe (recipes.h) as the
// defaults under both. Every key, its bounds and its flag come from one table
// (settings.h). Validation is strict: an unknown key (with the closest valid one), a wrong
// type or a value out of range is an error naming the key and what is accepted, before
// any work starts. to_json() round-trips, so the checkpoint sidecar records the exact
// config.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace braid::train {

struct ScheduleSettings {
  std::string name = "constant";  // constant, step, cosine, linear, warmup_cosine
  int64_t warmup_steps = 0;
  std::string warmup_type = "factor";  // factor, linear, log
  double warmup_start_ratio = 0.0;     // linear, log warm-ups
  int64_t total_steps = 0;             // 0: the run's length
  int64_t step_size = 1000;
  double gamma = 0.1;
  double min_lr = 0.0;
  double min_ratio = 0.0;  // warmup_cosine
  int64_t lag_steps = 0;
};

struct TrainConfig {
  nlohmann::json model = "cnn";           // a built-in name or a layer list (see model_spec.h)
  std::string dataset = "fashion-mnist";  // fashion-mnist, npy, text, image_folder, csv
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::vector<std::string> npy;         // train features, train labels, test features, test labels
  std::string npy_layout = "nchw";      // 4-D npy features: nchw (PyTorch's) or nhwc
  std::vector<std::string> text_files;  // empty: the fortunes corpus
  // Sharded training data (data/npy_shards.h): features and labels files (paths or globs),
  // paired in order, each rank reading its own; `npy` then holds only the test pair.
  std::vector<std::string> npy_shards, npy_shard_labels;
  // auto, on, off: map the features files, rows read on demand (data/npy_mapped.h).
  std::string npy_mmap = "auto";
  // dataset csv (data/csv.h): a table, its test table (empty: one fold of the train file's
  // csv_test_folds, shuffled by seed), and how to read them.
  std::string csv_train, csv_test;
  std::string csv_label = "-1";  // a column name, or an index (-1: the last)
  int64_t csv_skip_rows = 0;
  bool csv_header = true;
  std::string csv_delimiter;  // empty: '\t' for .tsv, else ','; "tab" is '\t'
  bool csv_standardize = false;
  // Regression and multi-label losses: these columns (names or indices) are f32 targets
  // [K] (empty: csv_label's column, read as one number).
  std::vector<std::string> csv_targets;
  int64_t csv_test_folds = 5;
  int64_t seq_len = 128;
  // dataset image_folder: a folder of class subfolders each (data/image_folder.h)
  std::string image_train, image_test;
  int64_t image_size = 0;  // the side images are resized to (0: the first training image's)
  int64_t image_channels = 3;
  double image_mean = 0.5, image_std = 0.5;  // on pixels in [0, 1], every channel

  int64_t epochs = 1;
  int64_t max_steps = 0;  // > 0: stop after this many steps
  int64_t batch = 128;
  // > 0: the samples of a step over all data-parallel ranks, whatever their number; each
  // rank's batch is its share (data::batch_share), uneven where the ranks do not divide it,
  // and `batch` is not used for training. 0: batch x data ranks.
  int64_t global_batch = 0;
  uint64_t seed = 0;
  int threads = 1;
  std::string precision = "fp32";  // fp32, bf16, fp16: the GEMMs' arithmetic (nn::Precision)
  struct Fp16 {                    // fp16's dynamic loss scaling (optim/loss_scaler.h)
    int64_t initial_scale_power = 16;
    int64_t loss_scale_window = 1000;
    int64_t hysteresis = 2;
  } fp16;
  // A run whose kernel choices to replay (train/kernel_record.h); empty: time them here.
  std::string kernel_choices;

  // The optimizer's settings in the form make_optimizer takes (one struct from the file to
  // the optimizer; lr and base_batch are read by the schedule).
  optim::OptimizerConfig optimizer;
  ScheduleSettings schedule;
  double clip_grad_norm = 0.0;
  bool augment_flip = false;
  int64_t augment_crop_pad = 0;
  double augment_erase = 0.0;    // random erasing probability
  double label_smoothing = 0.0;  // cross-entropy target (1 - eps) onehot + eps / C
  // The training loss (nn/loss_function.h): cross_entropy (class labels), or mse, l1, huber
  // (regression) and bce_with_logits (multi-label), which take f32 targets.
  std::string loss = "cross_entropy";
  std::vector<double> loss_class_weights;  // cross_entropy: one per class (empty: all 1)
  double huber_delta = 1.0;                // huber: where quadratic turns linear
  double ema_decay = 0.0;  // > 0: also evaluate an EMA of the weights (weight_average.h)

  // Distribution. `batch` is per rank (as PyTorch DDP's DataLoader); the global batch of a
  // step is batch x world size, unless global_batch sets it.
  // auto, single, ddp, local_sgd, ps, fedavg, pipeline, tensor, mesh
  std::string strategy = "auto";
  int64_t tensor_parallel = 0;  // > 1: the GPT cut by width across that many ranks
  double bucket_mb = 25;
  int64_t zero_stage = 0;           // ddp: ZeRO: 1 shards the optimizer state, 2 gradients too
  std::string comm_dtype = "fp32";  // ddp: fp32, bf16, fp16 on the wire
  // Model parallelism's mesh: data x tensor x pipeline = the job's ranks (0: from
  // tensor_parallel and pipeline.stages, the data axis taking the rest).
  struct Mesh {
    int64_t data = 0, tensor = 0, pipeline = 0;
  } mesh;
  struct Pipeline {
    int64_t stages = 0;  // > 1: pipeline parallelism over that many ranks (the job's size)
    int64_t micro_batches = 4;
    std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved
    int64_t chunks = 2;             // interleaved: chunks of layers a stage (v)
    bool recompute = false;         // keep only stage inputs; forward again in backward
  } pipeline;
  // How gradients cross the wire (parallel/codec.h): ddp, zero_stage, local_sgd.
  struct Compression {
    std::string codec = "none";  // none, bf16, fp16, int8, sign, topk, powersgd, onebit_adam
    int64_t int8_chunk = 256;
    // 32: on the cnn (5 epochs, 2 ranks) a scale per 32 floats lost 2.3 points (Adam) and 3.4
    // (SGD) where one per 256 lost 3.7 and 8.4, for 2 bits a float instead of 1.125.
    int64_t sign_chunk = 32;
    bool stochastic_rounding = false;
    double topk_ratio = 0.01;
    double topk_momentum = 0.9;
    int64_t topk_warmup_steps = 0;
    int64_t powersgd_rank = 4;
    int64_t start_iter = 10;
    double min_compression_rate = 2.0;
    int64_t freeze_step = 100;
  } compression;
  // DDP: priority scheduling of gradient pieces, each bucket updated in the next forward.
  struct Scheduler {
    bool priority = false;
    double partition_mb = 0;  // 0: tuned on the first steps (parallel/partition_tuner.h)
  } scheduler;
  struct LocalSgd {
    int64_t period = 8;      // local steps between parameter averages (H)
    int64_t start_step = 0;  // steps before it are synchronous DDP steps (post-local SGD)
  } local_sgd;
  // strategy auto with a cluster file: `braid plan`'s choice for this job (cli/plan_auto.h).
  struct Plan {
    std::string cluster_file;  // plan/cluster.h
    std::string profile_file;  // the model's profile, written by `braid plan --profile FILE`
  } plan;
  struct ParameterServer {
    std::string mode = "sync";    // sync, async, ssp (parallel/ps_shard.h)
    int64_t backup_workers = 0;   // sync: a step applies after workers - backup_workers gradients
    int64_t staleness_bound = 2;  // ssp: steps a worker may run ahead of the slowest
    bool staleness_lr = false;    // async, ssp: lr / (1 + staleness)
    // async, ssp: seconds a worker may stay silent before the servers count it lost (0: the
    // job's communication timeout)
    double worker_timeout_s = 0;
  } ps;
  // Elastic jobs (braid launch --min-ranks ...; train/elastic_run.h).
  struct Elastic {
    int64_t commit_every = 1;  // steps between in-memory commits: a failure loses fewer
    // A round keeps `batch` per rank and scales the lr by its ranks / the launch's, rather
    // than sharing the launch's global batch (elastic_run.h, round_config).
    bool scale_lr = false;
  } elastic;
  struct FedAvg {
    int64_t clients = 100;          // K: the clients the training set is split over
    double fraction = 0.1;          // C: the share of clients that train in a round
    int64_t local_epochs = 1;       // E: passes of a client over its shard per round
    int64_t rounds = 0;             // 0: as many as make `epochs` passes over the data
    std::string split = "iid";      // iid, dirichlet, labels_per_client (data/client_split.h)
    double alpha = 0.5;             // dirichlet concentration
    int64_t labels_per_client = 2;  // labels_per_client: k
    double prox_mu = 0;             // FedProx: the proximal term's weight (0: FedAvg)
    std::string server_optimizer = "avg";  // avg (FedAvg), avgm (FedAvgM), adam (FedAdam)
    double server_lr = 1.0;
    double server_momentum = 0.9;  // avgm: momentum; adam: beta1
    double server_beta2 = 0.99;    // adam
    double server_eps = 1e-3;      // adam: tau, the denominator's epsilon
  } fedavg;
  // Convergence decisions, made on the evaluations (the chief's where only it evaluates).
  struct StopRules {
    double target = 0;            // > 0: stop once the metric reaches it
    std::string metric = "auto";  // auto (accuracy, or loss for a language model), accuracy, loss
    int64_t patience = 0;         // > 0: stop after this many evaluations without improvement
    double min_rel_change = 0;    // > 0: stop when |loss - previous| / previous falls below it
  } stop;
  // Benchmarks: milliseconds this rank sleeps after each step, to play a straggler.
  double slow_step_ms = 0;
  bool slow_step_random = false;  // sleep a uniform [0, 2 slow_step_ms) instead: a jittery rank
  int64_t accumulate_steps = 1;
  bool deterministic = false;
  bool sync_batchnorm = false;

  std::string out = "runs/latest";
  std::string timeline;  // a Chrome trace of the run's steps (empty: none)
  int64_t log_every = 50;
  int64_t eval_every = 0;        // steps; 0: each epoch
  int64_t eval_batches = 0;      // 0: the whole evaluation split
  int64_t checkpoint_every = 0;  // steps; 0: each epoch
};

// The config `j` describes: the struct's defaults, overlaid by the recipe of the built-in
// model `j` names (cnn when it names none), overlaid by `j`. Throws braid::Error naming
// the key ("optimizer.lr") and the accepted values.
TrainConfig config_from_json(const nlohmann::json& j);
// `j` laid over `base` (no recipe: `base` is already a resolved config).
TrainConfig config_from_json(const nlohmann::json& j, const TrainConfig& base);
// A config file's JSON, unvalidated (for laying flags or other files over it), with its
// relative data paths (npy, text_files, data_dir) made absolute against the file's own
// folder: a config names its data as it sits beside it, wherever braid runs from.
// IoError when it cannot be read, Error naming the file when it is not JSON.
nlohmann::json read_config_file(const std::string& path);
// read_config_file, then config_from_json; errors name the file.
TrainConfig load_config_file(const std::string& path);
nlohmann::json to_json(const TrainConfig& c);
// Checks every key's bounds and the cross-field constraints (npy paths, the model spec's
// shapes and size).
void validate(const TrainConfig& c);

}  // namespace braid::train
