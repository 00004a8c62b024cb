// `braid bench ps --floats N [--iters K] [--mode sync|async|ssp]`, run under `braid launch
// --servers S --workers W`: the parameter-server exchange alone. Each worker pushes an
// N-float gradient and pulls the N updated parameters K times (a plain SGD step on the
// servers between), as a training step does without the compute. Worker 0 prints the
// exchange's time per round (the slowest worker's mean) and its algorithm bandwidth N x 4
// bytes / time: the size of model the job brings up to date per second, which is what
// `braid bench allreduce`'s algbw measures for data parallelism at the same size.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "comm/collectives.h"
#include "core/timer.h"
#include "launch/cluster_spec.h"
#include "launch/job.h"
#include "parallel/ps_worker.h"
#include "train/config.h"
#include "train/model_spec.h"
#include "train/ps_serve.h"
#include "train/strategy_setup.h"

namespace braid::cli {
namespace {

struct PsBenchFlags {
  int64_t floats = 1 << 20;
  int iters = 50;
  int warmup = 5;
  std::string mode = "sync";
  bool json = false;
};

// A model of `floats` parameters and no compute to speak of: one linear layer to one output.
train::TrainConfig exchange_config(const PsBenchFlags& f) {
  train::TrainConfig c;
  c.model = nlohmann::json{{"input", {f.floats - 1}},
                           {"layers", {{{"type", "linear"}, {"out_features", 1}}}}};
  c.optimizer.name = "sgd";
  c.optimizer.momentum = 0;
  c.strategy = "ps";
  c.ps.mode = f.mode;
  c.out = "";
  return c;
}

void run_ps_bench(const PsBenchFlags& f) {
  const std::optional<launch::ClusterSpec> cluster = launch::read_cluster_spec();
  BRAID_CHECK(cluster,
              "bench ps runs in a parameter-server job: braid launch --servers S "
              "--workers W -- braid bench ps");
  BRAID_CHECK(f.floats >= 2, "bench ps: --floats must be at least 2");
  launch::JoinOptions join;
  join.getenv = launch::job_env(*cluster);
  launch::Job job = launch::join_job(join);
  const parallel::PsLayout layout{cluster->num_workers, cluster->num_servers};
  const train::TrainConfig config = exchange_config(f);
  if (cluster->role == launch::Role::server)
    return train::serve_parameters(config, job.world, layout, cluster->index);

  parallel::PsWorker worker(train::build_model(config.model, 0).module, train::step_options(config),
                            job.world, layout);
  std::fill(worker.params().grads(), worker.params().grads() + worker.params().size(), 0.0f);
  worker.pull(0);
  int64_t step = 0;
  for (int i = 0; i < f.warmup; ++i, ++step) {
    worker.push(0.0f, step);
    worker.pull(step + 1);
  }
  Stopwatch watch;
  for (int i = 0; i < f.iters; ++i, ++step) {
    worker.push(0.0f, step);
    worker.pull(step + 1);
  }
  double seconds[1] = {watch.elapsed() / f.iters};
  worker.sum_over_ranks(seconds, 1, "bench times");  // the mean over the workers
  worker.finish();
  if (cluster->index != 0) return;
  const double per_round = seconds[0] / layout.workers;
  const double bytes = static_cast<double>(worker.params().size()) * sizeof(float);
  const double algbw = bytes / per_round / 1e9;
  if (f.json) {
    std::printf("%s\n", nlohmann::json{{"floats", worker.params().size()},
                                       {"bytes", bytes},
                                       {"workers", layout.workers},
                                       {"servers", layout.servers},
                                       {"mode", f.mode},
                                       {"time_us", per_round * 1e6},
                                       {"algbw_GBps", algbw}}
                            .dump()
                            .c_str());
  } else {
    std::printf("%12s %8s %8s %6s %12s %12s\n", "bytes", "workers", "servers", "mode", "time_us",
                "algbw_GB/s");
    std::printf("%12.0f %8d %8d %6s %12.1f %12.3f\n", bytes, layout.workers, layout.servers,
                f.mode.c_str(), per_round * 1e6, algbw);
  }
}

}  // namespace

void add_ps_bench(CLI::App& bench) {
  auto f = std::make_shared<PsBenchFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "ps", "Parameter-server push + pull of N floats (under braid launch --servers/--workers)");
  cmd->add_option("--floats", f->floats, "parameters exchanged per round")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 32));
  cmd->add_option("--iters", f->iters, "timed rounds")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--warmup", f->warmup, "untimed rounds first")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--mode", f->mode, "ps.mode of the servers")
      ->check(CLI::IsMember({"sync", "async", "ssp"}));
  cmd->add_flag("--json", f->json, "one JSON object instead of a table");
  cmd->callback([f] { run_ps_bench(*f); });
}

}  // namespace braid::cli
