// `braid bench train`: samples/s of the whole training step and its split.
//
// One process (`--strategy single`, the default): data wait, forward, backward and
// optimizer, GFLOP/s against the FMA peak measured now, allocations in the steady state
// and peak memory by category.
//
// Data parallel (`--strategy ddp -n N`, or under any launcher): every rank steps on its
// own batch; the step splits into forward, backward, optimizer, communication that compute
// did not hide, and data wait (the metrics' split). Then, for the overlap figure, the same
// ranks measure the two parts apart: compute alone (every rank stepping a one-process
// trainer at once, so the cores are as busy as in the step) and communication alone (every
// bucket's allreduce with no compute). A step well under their sum is communication that
// overlap hid.
//
// Pipeline (`--strategy pipeline -n P --micro-batches M --schedule gpipe|1f1b`): every
// stage steps on the same batch (--batch is the pipeline's); per stage: its compute, the
// time it waited for a neighbour and the schedule's span, whose ratio is the measured
// bubble, printed beside the theory (P - 1) / (M + P - 1); and each stage's peak memory.
//
// Timing follows bench/pytorch_ddp_bench.py so the two compare: --warmup untimed steps,
// then --repeats rounds of --steps steps; a round's time is its slowest rank's and the
// figures are the median round's; samples/s counts every rank's batch.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/median.h"
#include "cli/relaunch.h"
#include "comm/collectives.h"
#include "comm/group.h"
#include "core/cpu.h"
#include "core/gemm.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/peak.h"
#include "core/timer.h"
#include "data/loader.h"
#include "launch/env.h"
#include "launch/job.h"
#include "parallel/ddp.h"
#include "parallel/mesh_strategy.h"
#include "parallel/strategy.h"
#include "parallel/zero.h"
#include "train/trainer.h"

namespace braid::cli {
namespace {

struct TrainBenchFlags {
  std::string model = "mlp";
  std::string strategy = "single";
  std::string transport = "auto";
  std::string precision = "fp32";
  std::string comm_dtype = "fp32";
  // Gradient compression (config compression.*): compressed from the first timed step on.
  std::string codec = "none";
  int powersgd_rank = 4;
  double topk_ratio = 0.01;
  int64_t start_iter = 2;
  bool priority = false;  // scheduler.priority
  double partition_mb = 4;
  int64_t batch = 128;
  int steps = 30, warmup = 5, repeats = 5, threads = 1, ranks = 0, zero_stage = 0;
  double bucket_mb = 25;
  bool json = false, synthetic = false, deterministic = false;
  int micro_batches = 4, chunks = 2;
  std::string schedule = "1f1b";
  bool recompute = false;
  bool commit_cost = false;
  bool split = true;  // ddp: also time communication alone and compute alone
};

train::TrainConfig bench_config(const TrainBenchFlags& f) {
  train::TrainConfig config;
  config.model = f.model;
  config.batch = f.batch;
  config.threads = f.threads;
  config.strategy = f.strategy;
  config.bucket_mb = f.bucket_mb;
  config.deterministic = f.deterministic;
  config.precision = f.precision;
  config.comm_dtype = f.comm_dtype;
  config.compression.codec = f.codec;
  config.scheduler.priority = f.priority;
  config.scheduler.partition_mb = f.partition_mb;
  config.compression.powersgd_rank = f.powersgd_rank;
  config.compression.topk_ratio = f.topk_ratio;
  config.compression.start_iter = f.start_iter;
  config.compression.freeze_step = std::max<int64_t>(1, f.start_iter);
  config.zero_stage = f.zero_stage;
  config.pipeline.micro_batches = f.micro_batches;
  config.pipeline.schedule = f.schedule;
  config.pipeline.chunks = f.chunks;
  config.pipeline.recompute = f.recompute;
  if (f.model.starts_with(
          "gpt")) {  // as bench/pytorch_train_bench.py: AdamW for the language model
    config.dataset = "text";
    config.optimizer.name = "adamw";
    config.optimizer.lr = 1e-3;
  }
  if (f.codec == "onebit_adam") config.optimizer.name = "onebit_adam";
  if (f.codec == "topk") config.optimizer.momentum = 0;  // the codec keeps it (DGC)
  return config;
}

// The ranks of the job agree on things through this: the trainer's strategy when it spans
// the job, else the world group directly (one-process trainers on every rank), else
// nothing (one rank).
class Ranks {
 public:
  Ranks(train::Trainer& trainer, comm::Group* world) : trainer_(trainer), world_(world) {}
  train::Trainer& trainer() { return trainer_; }
  int rank() const { return world_ ? world_->rank() : 0; }
  int size() const { return world_ ? world_->size() : 1; }
  void sum(std::vector<double>& v) {
    if (trainer_.world_size() > 1)
      trainer_.strategy().sum_over_ranks(v.data(), v.size(), "benchmark timing");
    else if (world_ != nullptr && world_->size() > 1)
      comm::allreduce(*world_, v.data(), v.size(), DType::f64, ReduceOp::sum);
  }
  void barrier() {
    std::vector<double> x{0};
    sum(x);
  }
  // The largest of every rank's `value`.
  double max(double value) {
    std::vector<double> all(static_cast<size_t>(size()), 0);
    all[static_cast<size_t>(rank())] = value;
    sum(all);
    return *std::max_element(all.begin(), all.end());
  }
  // Every rank's `value`, averaged.
  double mean(double value) {
    std::vector<double> v{value};
    sum(v);
    return v[0] / size();
  }

 private:
  train::Trainer& trainer_;
  comm::Group* world_;
};

struct Split {
  std::vector<double> step, forward, backward, optimizer, comm_exposed, data_wait;
};

struct Rounds {
  std::vector<double> seconds;  // per round, its slowest rank's
  Split split;                  // this rank's per-step times
  std::vector<double> stage_compute, stage_waiting, stage_schedule;  // a pipeline stage's
  int64_t allocations = 0;  // in the timed steps, this rank
};

// --warmup steps, then --repeats rounds of --steps steps.
Rounds time_rounds(train::Trainer& trainer, Ranks& ranks, const TrainBenchFlags& f,
                   const data::Batch* synthetic) {
  Rounds out;
  auto one_step = [&] {
    Stopwatch w;
    const double waited = synthetic ? 0 : trainer.train_one_batch();
    if (synthetic) trainer.train_step(*synthetic);
    return std::pair{w.elapsed(), waited};
  };
  for (int i = 0; i < f.warmup; ++i) one_step();
  // A pipeline times its layers in its first step (to cut the stages): its peaks are the
  // steady state's, from here.
  if (f.strategy == "pipeline") MemoryTracker::process().reset_peaks();
  for (int r = 0; r < f.repeats; ++r) {
    ranks.barrier();
    Stopwatch round;
    for (int i = 0; i < f.steps; ++i) {
      const int64_t allocations = MemoryTracker::process().allocations();
      const auto [seconds, waited] = one_step();
      out.allocations += MemoryTracker::process().allocations() - allocations;
      const train::StepTimes& t = trainer.last_step_times();
      out.split.step.push_back(seconds);
      out.split.forward.push_back(t.forward);
      out.split.backward.push_back(t.backward);
      out.split.optimizer.push_back(t.optimizer);
      out.split.comm_exposed.push_back(t.communication_exposed);
      out.split.data_wait.push_back(waited);
      if (auto* p = dynamic_cast<const parallel::MeshStrategy*>(&trainer.strategy())) {
        const parallel::PipelineTimes& pt = p->last_pipeline_times();
        out.stage_compute.push_back(pt.compute);
        out.stage_waiting.push_back(pt.waiting);
        out.stage_schedule.push_back(pt.schedule);
      }
    }
    out.seconds.push_back(ranks.max(round.elapsed()));
  }
  return out;
}

// Elastic training's steps (transactional, an in-memory commit after each: Trainer::commit)
// against the usual ones: rounds alternated, each side's median step over the slowest rank,
// both in seconds.
struct CommitCost {
  double with_s = 0, without_s = 0;
  size_t bytes = 0;  // what a commit copied
};
CommitCost commit_cost(train::Trainer& trainer, Ranks& ranks, const TrainBenchFlags& f,
                       const data::Batch* synthetic) {
  train::TrainCommit commit;
  trainer.commit(commit);  // its buffers, allocated once as an elastic job's are
  std::vector<double> with, without;
  for (int r = 0; r < 2 * f.repeats; ++r) {
    const bool commits = r % 2 == 0;
    trainer.make_transactional(commits);
    ranks.barrier();
    Stopwatch round;
    for (int i = 0; i < f.steps; ++i) {
      if (synthetic)
        trainer.train_step(*synthetic);
      else
        trainer.train_one_batch();
      if (commits) trainer.commit(commit);
    }
    (commits ? with : without).push_back(ranks.max(round.elapsed()) / f.steps);
  }
  trainer.make_transactional(false);
  size_t bytes = commit.model.size() + commit.optimizer.size() + commit.average.size() +
                 commit.buffers.size() + commit.position.size();
  // A sharded strategy's: its shard, copied and then passed on to the next rank.
  if (commit.sharded()) bytes = 2 * commit.mine[0].bytes().size();
  return {median(with), median(without), bytes};
}

// Compute alone: a one-process trainer of the same model on every rank at once, no
// communication; returns the median step seconds of the slowest rank's rounds.
double compute_alone(const TrainBenchFlags& f, Ranks& ranks, uint64_t seed) {
  TrainBenchFlags single = f;
  single.strategy = "single";
  single.codec = "none";  // nothing crosses a wire
  single.priority = false;
  single.comm_dtype = "fp32";
  train::Trainer trainer(bench_config(single), /*load_data=*/false);
  data::Batch batch;
  trainer.fill_random_batch(batch, seed);
  Rounds rounds = time_rounds(trainer, ranks, single, &batch);
  return median(rounds.seconds) / f.steps;
}

// Communication alone: DDP's buckets allreduced with nothing else running.
double communication_alone(parallel::Ddp& ddp, Ranks& ranks, int calls) {
  std::vector<double> seconds;
  ddp.communicate_alone();  // warm
  for (int i = 0; i < calls; ++i) {
    ranks.barrier();
    seconds.push_back(ranks.max(ddp.communicate_alone()));
  }
  return median(seconds);
}

// mem: the training's peaks, taken before the alone-measurements build a second trainer.
void print_memory(const MemoryCounters& mem, nlohmann::json& out, bool print) {
  for (size_t c = 0; c < kMemCategoryCount; ++c)
    out["peak_memory_bytes"][std::string(mem_category_name(static_cast<MemCategory>(c)))] =
        mem.peak[c];
  if (!print) return;
  std::printf("  peak memory by category (this rank):\n");
  for (size_t c = 0; c < kMemCategoryCount; ++c)
    if (mem.peak[c])
      std::printf("    %-20s %10.2f MiB\n",
                  std::string(mem_category_name(static_cast<MemCategory>(c))).c_str(),
                  static_cast<double>(mem.peak[c]) / (1 << 20));
}

// Each stage's compute, waiting, schedule span and bubble (medians of the timed steps), its
// peak memory by category, and the theory's bubble.
void report_pipeline(const TrainBenchFlags& f, const Rounds& rounds, const MemoryCounters& mem,
                     Ranks& ranks, nlohmann::json& out, bool print) {
  const int n = ranks.size(), me = ranks.rank();
  std::vector<double> all(static_cast<size_t>(n) * (4 + kMemCategoryCount), 0);
  double* mine = all.data() + static_cast<size_t>(me) * (4 + kMemCategoryCount);
  mine[0] = median(rounds.stage_compute);
  mine[1] = median(rounds.stage_waiting);
  mine[2] = median(rounds.stage_schedule);
  std::vector<double> bubbles;
  for (size_t i = 0; i < rounds.stage_schedule.size(); ++i)
    bubbles.push_back(rounds.stage_waiting[i] / rounds.stage_schedule[i]);
  mine[3] = median(bubbles);
  for (size_t c = 0; c < kMemCategoryCount; ++c) mine[4 + c] = static_cast<double>(mem.peak[c]);
  ranks.sum(all);
  const int chunks = f.schedule == "interleaved" ? f.chunks : 1;
  const double theory = parallel::theoretical_bubble(n, f.micro_batches, chunks);
  out["micro_batches"] = f.micro_batches;
  out["schedule"] = f.schedule;
  out["chunks"] = chunks;
  out["recompute"] = f.recompute;
  out["bubble_theory"] = theory;
  if (auto* p = dynamic_cast<const parallel::MeshStrategy*>(&ranks.trainer().strategy()))
    out["cut"] = p->describe_cut();
  double bubble_sum = 0;
  for (int s = 0; s < n; ++s) {
    const double* v = all.data() + static_cast<size_t>(s) * (4 + kMemCategoryCount);
    nlohmann::json st = {{"compute_ms", v[0] * 1e3},
                         {"waiting_ms", v[1] * 1e3},
                         {"schedule_ms", v[2] * 1e3},
                         {"bubble", v[3]}};
    for (size_t c = 0; c < kMemCategoryCount; ++c)
      st["peak_memory_bytes"][std::string(mem_category_name(static_cast<MemCategory>(c)))] =
          v[4 + c];
    out["stages"].push_back(st);
    bubble_sum += v[3];
  }
  out["bubble_mean"] = bubble_sum / n;
  if (!print) return;
  std::printf("  pipeline: %s, %d micro-batches%s; %s\n", f.schedule.c_str(), f.micro_batches,
              f.recompute ? ", recompute" : "", std::string(out.value("cut", "")).c_str());
  std::printf("  %-6s %12s %12s %12s %8s %14s %14s\n", "stage", "compute ms", "waiting ms",
              "schedule ms", "bubble", "activations", "param+grad+opt");
  for (int s = 0; s < n; ++s) {
    const auto& st = out["stages"][static_cast<size_t>(s)];
    const auto& m = st["peak_memory_bytes"];
    const double weights = static_cast<double>(m["parameters"]) +
                           static_cast<double>(m["gradients"]) +
                           static_cast<double>(m["optimizer"]);
    std::printf("  %-6d %12.2f %12.2f %12.2f %8.3f %10.1f MiB %10.1f MiB\n", s,
                static_cast<double>(st["compute_ms"]), static_cast<double>(st["waiting_ms"]),
                static_cast<double>(st["schedule_ms"]), static_cast<double>(st["bubble"]),
                static_cast<double>(m["activations"]) / (1 << 20), weights / (1 << 20));
  }
  std::printf(
      "  bubble: measured %.3f (mean of the stages), theory ((P-1)/v)/(M+(P-1)/v) = "
      "%.3f\n",
      bubble_sum / n, theory);
}

void run_train_bench(const TrainBenchFlags& f) {
  BRAID_CHECK(f.strategy == "single" || f.strategy == "ddp" || f.strategy == "pipeline" ||
                  f.strategy == "tensor",
              "bench train: --strategy is '", f.strategy, "'; use single, ddp, pipeline or tensor");
  BRAID_CHECK(f.steps > 0 && f.repeats > 0 && f.warmup >= 0 && f.batch > 0,
              "bench train: --steps, --repeats and --batch must be > 0, --warmup >= 0");
  const launch::RankEnv env = launch::read_rank_env();
  set_log_rank(env.rank);  // info lines from rank 0 only (core/log.h)
  const bool in_job = env.world_size > 1;
  if (!in_job && f.ranks > 1) relaunch_as_ranks(f.ranks, f.transport);
  BRAID_CHECK(f.strategy == "single" || in_job, "bench train --strategy ", f.strategy,
              " needs ranks: give -n N or run it under a launcher");

  set_blas_threads(f.threads);
  std::optional<launch::Job> job;
  if (in_job) {
    launch::JoinOptions jo;
    if (f.transport != "auto") jo.transport = comm::parse_transport_kind(f.transport);
    job.emplace(launch::join_job(jo));
  }
  const train::TrainConfig config = bench_config(f);
  // --strategy single in a job: every rank trains alone (compute with the cores shared).
  train::Trainer trainer = f.strategy != "single" ? train::Trainer(config, job->world, !f.synthetic)
                                                  : train::Trainer(config, !f.synthetic);
  Ranks ranks(trainer, job ? job->world.get() : nullptr);
  const bool printer = ranks.rank() == 0;
  const bool lm = trainer.model().task == train::Task::language_model;
  // A pipeline's stages, and tensor-parallel ranks, all work on one batch.
  const int batches = f.strategy == "pipeline" || f.strategy == "tensor" ? 1 : ranks.size();
  const double per_step =
      static_cast<double>(f.batch) * batches * (lm ? static_cast<double>(config.seq_len) : 1);

  data::Batch synthetic;
  const auto seed = static_cast<uint64_t>(1 + ranks.rank());  // a different batch per rank
  if (f.synthetic) trainer.fill_random_batch(synthetic, seed);
  MemoryTracker::process().reset_peaks();
  const Rounds rounds = time_rounds(trainer, ranks, f, f.synthetic ? &synthetic : nullptr);
  const double step_s = median(rounds.seconds) / f.steps;
  const Split& s = rounds.split;
  const double forward = ranks.mean(median(s.forward));
  const double backward = ranks.mean(median(s.backward));
  const double optimizer = ranks.mean(median(s.optimizer));
  const double exposed = ranks.mean(median(s.comm_exposed));
  const double waited = ranks.mean(median(s.data_wait));
  const double allocations = ranks.max(static_cast<double>(rounds.allocations));
  std::optional<CommitCost> commits;
  if (f.commit_cost) commits = commit_cost(trainer, ranks, f, f.synthetic ? &synthetic : nullptr);

  const char* unit = lm ? "tokens_per_s" : "samples_per_s";
  nlohmann::json out = {{"impl", "braid"},
                        {"model", f.model},
                        {"strategy", f.strategy},
                        {"ranks", ranks.size()},
                        {"batch_per_rank", f.batch},
                        {"threads_per_rank", f.threads},
                        {"steps", f.steps},
                        {"warmup", f.warmup},
                        {"repeats", f.repeats},
                        {unit, per_step / step_s},
                        {"step_ms", step_s * 1e3},
                        {"forward_ms", forward * 1e3},
                        {"backward_ms", backward * 1e3},
                        {"optimizer_ms", optimizer * 1e3},
                        {"comm_exposed_ms", exposed * 1e3},
                        {"data_wait_ms", waited * 1e3},
                        {"steady_state_allocations", allocations},
                        {"data", f.synthetic ? "synthetic" : "real"},
                        {"precision", f.precision}};
  std::vector<double> round_rates;
  for (double r : rounds.seconds) round_rates.push_back(per_step * f.steps / r);
  out["round_" + std::string(unit)] = round_rates;

  double alone_compute = 0, alone_comm = 0;
  const MemoryCounters mem = MemoryTracker::process().snapshot();
  if (f.strategy == "pipeline") {
    report_pipeline(f, rounds, mem, ranks, out, printer && !f.json);
  } else if (f.strategy == "tensor") {
    if (auto* tp = dynamic_cast<parallel::MeshStrategy*>(&trainer.strategy()))
      out["local_parameter_floats"] = tp->local_floats();
    out["comm_exposed_ms"] = exposed * 1e3;
  } else if (f.strategy == "ddp") {
    out["deterministic"] = f.deterministic;
    out["bucket_mb"] = f.bucket_mb;
    out["comm_dtype"] = f.comm_dtype;
    out["codec"] = f.codec;
    out["priority"] = f.priority;
    out["partition_mb"] = f.partition_mb;
    {
      const parallel::CodecReport& r = trainer.strategy().last_codec_report();
      out["wire_bytes_per_step"] = r.wire_bytes;
      out["compression_ratio"] = r.ratio();
      out["error_feedback_norm"] = r.error_norm;
    }
    out["zero_stage"] = f.zero_stage;
    const int n = ranks.size();
    if (auto* zero = dynamic_cast<parallel::Zero*>(&trainer.strategy())) {
      // A ring reduce-scatter and a ring all-gather each send N-1 of a bucket's N chunks.
      double gradient_bytes = 0, chunk_bytes = 0;
      for (const auto& b : zero->buckets()) {
        gradient_bytes += static_cast<double>(b.end - b.begin) * 4;
        chunk_bytes += static_cast<double>(b.chunk) * 4;
      }
      out["gradient_bytes"] = gradient_bytes;
      // Counted by the strategy in its last step: stage 3 gathers each bucket for forward
      // and again for backward.
      out["ring_bytes_sent_per_rank"] = zero->bytes_sent_last_step();
      out["ring_bytes_sent_per_rank_stage1"] = chunk_bytes * 2.0 * (n - 1);
      out["buckets"] = zero->buckets().size();
    } else {
      auto* ddp = dynamic_cast<parallel::Ddp*>(&trainer.strategy());
      BRAID_CHECK(ddp != nullptr, "bench train: the ddp strategy was not built");
      // What one rank sends a step: a ring allreduce sends 2 (N-1)/N of each bucket.
      double bucket_bytes = 0;
      for (const auto& b : ddp->buckets()) bucket_bytes += static_cast<double>(b.end - b.begin) * 4;
      out["gradient_bytes"] = bucket_bytes;
      // fp32's; a codec's own count is wire_bytes_per_step.
      out["ring_bytes_sent_per_rank"] = bucket_bytes * 2.0 * (n - 1) / n;
      out["buckets"] = ddp->buckets().size();
      if (f.split) {
        alone_comm = communication_alone(*ddp, ranks, std::max(5, f.repeats));
        alone_compute = compute_alone(f, ranks, seed);
        out["compute_alone_ms"] = alone_compute * 1e3;
        out["comm_alone_ms"] = alone_comm * 1e3;
        out["step_over_sum_of_parts"] = step_s / (alone_compute + alone_comm);
      }
    }
  } else {
    const double gflops = trainer.flops_per_step() / step_s * 1e-9 * batches;
    const PeakResult peak =
        measure_fma_peak(isa_supported(Isa::avx2) ? Isa::avx2 : best_isa(), 0.3);
    out["gflops"] = gflops;
    out["fma_peak_gflops"] = peak.best_gflops;
    out["fraction_of_peak"] = peak.best_gflops > 0 ? gflops / peak.best_gflops : 0;
  }
  if (commits) {
    out["commit_step_ms"] = commits->with_s * 1e3;
    out["no_commit_step_ms"] = commits->without_s * 1e3;
    out["commit_cost_ratio"] = commits->with_s / commits->without_s;
    out["commit_bytes"] = static_cast<double>(commits->bytes);
  }
  if (!printer) return;
  if (f.json) {
    print_memory(mem, out, false);
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf(
      "model %s  strategy %s  %d rank%s x batch %lld  threads %d  (%s data; median of %d rounds "
      "of %d steps after %d warm-up; a round is its slowest rank's)\n",
      f.model.c_str(), f.strategy.c_str(), ranks.size(), ranks.size() == 1 ? "" : "s",
      static_cast<long long>(f.batch), f.threads, f.synthetic ? "synthetic" : "real", f.repeats,
      f.steps, f.warmup);
  std::printf("  %-26s %12.0f\n", lm ? "tokens/s (all ranks)" : "samples/s (all ranks)",
              per_step / step_s);
  std::printf("  %-26s %12.2f ms\n", "step", step_s * 1e3);
  std::printf("  %-26s %12.2f ms\n", "  data wait", waited * 1e3);
  std::printf("  %-26s %12.2f ms\n", "  forward + loss", forward * 1e3);
  std::printf("  %-26s %12.2f ms\n", "  backward", backward * 1e3);
  std::printf("  %-26s %12.2f ms\n", "  optimizer", optimizer * 1e3);
  if (f.strategy != "single")
    std::printf("  %-26s %12.2f ms\n", "  communication exposed", exposed * 1e3);
  if (f.strategy == "ddp") {
    std::printf("  %-26s %12.2f MB  (%zu buckets)\n", "sent a step a rank",
                static_cast<double>(out["ring_bytes_sent_per_rank"]) * 1e-6,
                static_cast<size_t>(out["buckets"]));
  }
  if (out.contains("comm_alone_ms")) {
    std::printf("  %-26s %12.2f ms\n", "compute alone", alone_compute * 1e3);
    std::printf("  %-26s %12.2f ms  (%zu buckets)\n", "communication alone", alone_comm * 1e3,
                static_cast<size_t>(out["buckets"]));
    std::printf("  %-26s %12.2f  (below 1: overlap hid communication)\n", "step / (compute + comm)",
                step_s / (alone_compute + alone_comm));
  } else if (out.contains("gflops")) {
    std::printf("  %-26s %12.1f (%.0f%% of the %.1f GFLOP/s FMA peak measured now)\n", "GFLOP/s",
                static_cast<double>(out["gflops"]),
                100 * static_cast<double>(out["fraction_of_peak"]),
                static_cast<double>(out["fma_peak_gflops"]));
  }
  std::printf("  %-26s %12.0f\n", "allocations in steps", allocations);
  if (commits)
    std::printf("  %-26s %12.2f ms with, %.2f ms without: %.3fx  (%.0f bytes a commit)\n",
                "elastic commit every step", commits->with_s * 1e3, commits->without_s * 1e3,
                commits->with_s / commits->without_s, static_cast<double>(commits->bytes));
  print_memory(mem, out, true);
}

}  // namespace

void add_train_bench(CLI::App& bench) {
  auto f = std::make_shared<TrainBenchFlags>();
  CLI::App* tr = bench.add_subcommand("train", "training step throughput and split");
  tr->add_option("--model", f->model, "mlp, cnn, cnn-bn, gpt-tiny, gpt-small");
  tr->add_option("--strategy", f->strategy,
                 "single (one process per rank), ddp, pipeline (one stage per rank) or tensor "
                 "(the GPT cut by width across the ranks)");
  tr->add_option("-n,--ranks", f->ranks, "outside a job: launch this many local ranks");
  tr->add_option("--transport", f->transport, "with -n: auto, shm or tcp");
  tr->add_option("--batch", f->batch, "batch size per rank");
  tr->add_option("--steps", f->steps, "steps per timed round");
  tr->add_option("--repeats", f->repeats, "timed rounds (the median is reported)");
  tr->add_option("--warmup", f->warmup, "unmeasured steps first");
  tr->add_option("--threads", f->threads, "BLAS threads per rank");
  tr->add_option("--bucket-mb", f->bucket_mb, "ddp: gradient bucket size in MiB");
  tr->add_flag("--deterministic", f->deterministic, "ddp: rank-ordered reductions");
  tr->add_option("--zero-stage", f->zero_stage,
                 "ddp: ZeRO, 1 shards the optimizer state, 2 the gradients too, 3 the parameters")
      ->check(CLI::Range(0, 3));
  tr->add_option("--precision", f->precision, "the GEMMs' arithmetic: fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  tr->add_option("--codec", f->codec,
                 "ddp: gradient compression codec: none, bf16, fp16, int8, sign, topk, powersgd, "
                 "onebit_adam");
  tr->add_option("--powersgd-rank", f->powersgd_rank, "powersgd: rank of the factors");
  tr->add_option("--topk-ratio", f->topk_ratio, "topk: fraction of each bucket sent");
  tr->add_option("--start-iter", f->start_iter,
                 "powersgd, onebit_adam: uncompressed steps first (within the warm-up)");
  tr->add_flag("--priority", f->priority,
               "ddp: priority scheduling of gradient pieces, updates in the next forward");
  tr->add_option("--partition-mb", f->partition_mb,
                 "--priority: MiB per piece (fixed here, 4 by default: a tuned run's first steps "
                 "would try other sizes inside the timed rounds)");
  tr->add_option("--comm-dtype", f->comm_dtype, "ddp: gradients on the wire: fp32, bf16, fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  tr->add_option("--micro-batches", f->micro_batches, "pipeline: micro-batches a step (M)");
  tr->add_option("--schedule", f->schedule, "pipeline: gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  tr->add_option("--chunks", f->chunks, "pipeline interleaved: chunks of layers a stage");
  tr->add_flag("--recompute", f->recompute, "pipeline: forward again in backward");
  tr->add_flag("--json", f->json, "one JSON object instead of a table");
  tr->add_flag("!--no-split", f->split,
               "ddp: skip timing communication alone and compute alone (slow links: each "
               "allreduce of a big model takes seconds)");
  tr->add_flag("--commit-cost", f->commit_cost,
               "also time elastic training's in-memory commit after every step against none "
               "(rounds alternated)");
  tr->add_flag("--synthetic", f->synthetic, "random inputs instead of the dataset");
  tr->callback([f] { run_train_bench(*f); });
}

}  // namespace braid::cli
