// `braid train`: a training run from a JSON config and/or flags (flags win), and
// `braid eval`: test loss and accuracy (a regression loss: MSE and MAE) of a checkpoint.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "cli/commands.h"
#include "cli/error_report.h"
#include "cli/plan_auto.h"
#include "cli/train_settings.h"
#include "core/gemm.h"
#include "core/log.h"
#include "launch/cluster_spec.h"
#include "launch/env.h"
#include "launch/job.h"
#include "parallel/ps_restarts.h"
#include "parallel/ps_worker.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/config_agreement.h"
#include "train/deepspeed_config.h"
#include "train/elastic_run.h"
#include "train/event_stream_observer.h"
#include "train/ps_serve.h"
#include "train/stop_signal.h"
#include "train/strategy_setup.h"
#include "train/trainer.h"

namespace braid::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TrainFlags {
  std::string config, deepspeed, resume, init_from, cluster;
  std::vector<std::string> rename;  // --init-from's name map
  bool overwrite = false;
  mutable bool deepspeed_notes_printed = false;  // resolve() may run twice
  std::function<void(json&)> apply_settings;
};

// Lays `top` over `base`: a key of `top` replaces the same key of `base`, except that the
// optimizer and schedule objects are merged key by key (a file that sets only
// optimizer.lr keeps the rest of the base's optimizer). A model spec is replaced whole.
void overlay(json& base, const json& top) {
  if (!top.is_object() || !base.is_object()) {
    base = top;
    return;
  }
  for (auto it = top.begin(); it != top.end(); ++it) {
    json& slot = base[it.key()];
    if ((it.key() == "optimizer" || it.key() == "schedule") && slot.is_object() && it->is_object())
      for (auto inner = it->begin(); inner != it->end(); ++inner) slot[inner.key()] = *inner;
    else
      slot = *it;
  }
}

// Where a run executes: its ranks, and the workers of a parameter-server job.
struct RunPlace {
  int world = 1;
  std::optional<int> ps_workers;
};

// The run directory a checkpoint directory belongs to: the parent of "checkpoint" (or its
// .previous / .partial), else the directory itself.
std::string run_dir_of(const std::string& checkpoint_dir) {
  const fs::path p = fs::path(checkpoint_dir).lexically_normal();
  const fs::path dir = p.filename().empty() ? p.parent_path() : p;
  if (dir.filename().string().starts_with("checkpoint"))
    return dir.has_parent_path() ? dir.parent_path().string() : std::string(".");
  return dir.string();
}

// Ranks that share out the batch (the data axis): a parameter-server job's workers, a
// mesh's data axis, else every rank.
int data_world(const train::TrainConfig& config, const RunPlace& place) {
  if (place.ps_workers) return *place.ps_workers;
  try {
    if (const auto mesh = train::mesh_shape(config, place.world)) return mesh->data;
  } catch (const Error&) {
    // An impossible mesh for this world is the trainer's error to report, with its key.
  }
  return place.world;
}

// A resume under another data-parallel width keeps the run's global batch: batch =
// global / ranks, and accumulate_steps chosen to keep the run's micro-batch where it
// divides (so a deterministic run resumed on fewer ranks keeps its bits). Said in one line.
train::TrainConfig keep_global_batch(train::TrainConfig config, const json& state,
                                     const RunPlace& place, const std::string& dir) {
  // global_batch keeps itself at any number of ranks.
  if (config.global_batch > 0) return config;
  if (!state.contains("loader") || !state["loader"].contains("world_size")) return config;
  const json& l = state["loader"];
  const int64_t saved_world = l.value("world_size", int64_t{0});
  const int64_t saved_batch = l.value("batch", int64_t{0});
  const int64_t saved_accumulate = state["config"].value("accumulate_steps", int64_t{1});
  const int64_t world = data_world(config, place);
  if (saved_world <= 0 || saved_batch <= 0 || saved_world == world) return config;
  const int64_t global = saved_world * saved_batch;
  BRAID_CHECK(global % world == 0, "checkpoint '", dir, "' was trained at a global batch of ",
              global, " (", saved_world, " ranks x batch ", saved_batch, "), which ", world,
              " ranks cannot share equally; pass --batch to choose this run's per-rank batch, or "
              "--global_batch ",
              global, " to share it unevenly");
  config.batch = global / world;
  const int64_t micro = saved_batch / std::max<int64_t>(1, saved_accumulate);
  if (micro > 0 && config.batch % micro == 0)
    config.accumulate_steps = config.batch / micro;
  else if (config.batch % config.accumulate_steps != 0)
    config.accumulate_steps = 1;
  log_info("resuming a run of ", saved_world, " ranks x batch ", saved_batch, " on ", world,
           world == 1 ? " rank" : " ranks", ": batch ", config.batch, " per rank",
           config.accumulate_steps > 1
               ? detail::concat(" in ", config.accumulate_steps, " micro-batches")
               : std::string(),
           " keeps its global batch of ", global, " (pass --batch to change it)");
  return train::config_from_json(train::to_json(config));
}

// The keys that say how a run was distributed (its strategy and that strategy's knobs). A
// checkpoint holds the full model whatever they were, so evaluating it, or resuming it as
// one process, drops them: the defaults (one process) apply unless flags set them again.
void drop_distribution(json& j) {
  for (const char* key :
       {"strategy", "mesh", "tensor_parallel", "pipeline", "local_sgd", "ps", "fedavg",
        "zero_stage", "comm_dtype", "compression", "sync_batchnorm", "bucket_mb"})
    j.erase(key);
}

// `j`'s leaves as dotted keys ("optimizer.lr"); a model spec is one leaf.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object() && key != "model")
      flatten(*it, key, out);
    else
      out[key] = *it;
  }
}

bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// Maps f.deepspeed's DeepSpeed config (train/deepspeed_config.h) for this job's data ranks
// and lays it over `j` (and over `file`, --config's JSON, so later steps see what it set).
// A key --config sets to another value is an error naming both files.
void apply_deepspeed(const TrainFlags& f, const RunPlace& place, json& file, json& j) {
  int64_t world = place.ps_workers ? *place.ps_workers : place.world;
  try {  // a mesh's data axis; a config too broken to read reports its error later
    world = data_world(train::config_from_json(j), place);
  } catch (const Error&) {
  }
  const train::DeepSpeedMapping ds = train::load_deepspeed_config(f.deepspeed, world);
  std::map<std::string, json> from_file, from_ds;
  flatten(file, "", from_file);
  flatten(ds.config, "", from_ds);
  for (const auto& [key, value] : from_ds) {
    const auto it = from_file.find(key);
    if (it != from_file.end() && !same_value(it->second, value))
      BRAID_THROW(Error, "--config '", f.config, "' sets '", key, "' to ", it->second.dump(),
                  " and --deepspeed '", f.deepspeed, "' to ", value.dump(),
                  "; remove it from one file or make them agree");
  }
  for (json* target : {&file, &j})
    for (const auto& [key, value] : from_ds) {
      json* slot = target;
      size_t begin = 0;
      for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', begin)) {
        slot = &(*slot)[key.substr(begin, dot - begin)];
        begin = dot + 1;
      }
      (*slot)[key.substr(begin)] = value;
    }
  if (!f.deepspeed_notes_printed)
    for (const std::string& note : ds.notes) log_info(note);
  f.deepspeed_notes_printed = true;
}

// The config of a run: the checkpoint's own when resuming, then the config file, then the
// flags, each laid over the one before, and validated once so errors name keys the same
// way whichever layer set them.
//
// A resume writes into the run directory it was given (a copied or moved run continues
// where it now lies), unless the config file or flags name an --out. Resumed as one
// process, the run's distribution keys are dropped. Under another world size the global
// batch is kept unless `batch` is set (keep_global_batch).
train::TrainConfig resolve(const TrainFlags& f, const std::string& resume_dir,
                           const RunPlace& place) {
  json j = json::object();
  json saved_state;
  std::string source;
  if (!resume_dir.empty()) {
    saved_state = train::read_train_state(resume_dir);
    if (!saved_state.contains("config") || !saved_state["config"].is_object())
      BRAID_THROW(Error, "checkpoint '", resume_dir,
                  "/state.json' holds no training config (train_state.config); pass --config");
    j = saved_state["config"];
    j["out"] = run_dir_of(resume_dir);
    if (place.world == 1 && !place.ps_workers) drop_distribution(j);
    source = "the config saved in '" + resume_dir + "/state.json'";
  }
  json file = json::object();
  if (!f.config.empty()) {
    file = train::read_config_file(f.config);
    overlay(j, file);
    source = source.empty() ? f.config : f.config + " over " + source;
  }
  if (!f.deepspeed.empty()) {
    apply_deepspeed(f, place, file, j);
    source = source.empty() ? f.deepspeed : f.deepspeed + " over " + source;
  }
  json flags = json::object();
  f.apply_settings(flags);
  f.apply_settings(j);
  try {
    train::TrainConfig config = train::config_from_json(j);
    if (!resume_dir.empty() && !file.contains("batch") && !flags.contains("batch"))
      config = keep_global_batch(config, saved_state, place, resume_dir);
    return config;
  } catch (const Error& e) {
    if (source.empty()) throw;
    BRAID_THROW(Error, source, " (with flags): ", e.what());
  }
}

constexpr const char* kRunOutputs[] = {"checkpoint", "checkpoint.previous", "checkpoint.partial",
                                       "metrics.jsonl", "data.json"};

// A run's outputs in `out`, or empty: what a new run would replace or append to.
std::string existing_outputs(const std::string& out) {
  std::string found;
  for (const char* name : kRunOutputs)
    if (fs::exists(fs::path(out) / name)) found += (found.empty() ? "" : ", ") + std::string(name);
  return found;
}

// A parameter-server job's server: serves its key range until the workers are done. It
// keeps serving through SIGTERM (the workers save their checkpoint with its help, then
// finish, which ends it).
void run_server(const train::TrainConfig& config, const launch::ClusterSpec& spec, launch::Job& job,
                const parallel::PsLayout& layout, const std::string& resume_dir,
                std::shared_ptr<parallel::PsRestarts> restarts) {
  const train::StopOnSignal keep_serving;
  train::serve_parameters(config, job.world, layout, spec.index, resume_dir, std::move(restarts));
}

// A restarted worker of a parameter-server job (a new process in a dead worker's place):
// the servers say at which step it goes on, and it reads its data from there. Restarted in
// the chief's place it keeps the chief's duties (evaluating, checkpointing, deciding stops,
// the run's outputs), with what the chief kept beside the model (its stop rules' history,
// the weight average) from the run's last checkpoint.
void rejoin_as_worker(train::Trainer& trainer, const train::TrainConfig& config, int incarnation) {
  auto& worker = dynamic_cast<parallel::PsWorker&>(trainer.strategy());
  if (trainer.writes_outputs() && !config.out.empty() &&
      fs::exists(fs::path(config.out) / "checkpoint" / "state.json"))
    trainer.load_checkpoint(config.out);
  const int64_t step = worker.rejoin();
  trainer.continue_at(step);
  log_warn("ps worker ", trainer.rank(), ": restarted (restart ", incarnation,
           "); rejoined the job at step ", step, " (the servers' step for it)");
}

// On the rank that writes outputs, with everything loaded (--overwrite may name the run
// being resumed): clears what --overwrite replaces and records the config.
void prepare_outputs(const TrainFlags& f, const train::Trainer& trainer,
                     const train::TrainConfig& config, bool auto_resumed = false) {
  if (!trainer.writes_outputs()) return;
  // A restart's command line is the first start's: its --overwrite meant that run's start.
  if (f.overwrite && !auto_resumed)
    for (const char* name : kRunOutputs) fs::remove_all(fs::path(config.out) / name);
  fs::create_directories(config.out);
  train::write_file_atomic(config.out + "/config.json", train::to_json(config).dump(2) + "\n");
  // How the data was read (dataset csv: class names, feature scaling), for whoever reads
  // the model's outputs back.
  if (!trainer.data_record().is_null())
    train::write_file_atomic(config.out + "/data.json", trainer.data_record().dump(2) + "\n");
}

// The exit a run's outcome makes.
void report(const train::RunOutcome& outcome, bool writes_outputs,
            const train::TrainConfig& config) {
  // Stopped by a signal, with a checkpoint: the run is not finished, so the exit status is
  // the shell's "killed by signal N" (128 + N). A scheduler then treats the job as
  // interrupted, not completed: Kubernetes restarts it, Slurm requeues it, and with
  // --resume it continues. (CLI11 exits quietly with a RuntimeError's code.)
  if (outcome.stop_signal != 0) throw CLI::RuntimeError(128 + outcome.stop_signal);
  if (!outcome.unfinished.empty())
    BRAID_THROW(Error, "the run ended unfinished at step ", outcome.step, ": ", outcome.unfinished,
                writes_outputs
                    ? "; its checkpoint is in " + config.out + "/checkpoint (--resume it)"
                    : std::string());
}

// Under braid worker: this rank's events for the job server (train/event_stream_observer.h),
// where BRAID_EVENTS_DIR says; null without it.
std::shared_ptr<train::EventStreamObserver> event_stream(const launch::GetEnv& getenv, int rank) {
  const char* dir = getenv("BRAID_EVENTS_DIR");
  if (dir == nullptr || *dir == '\0') return nullptr;
  fs::create_directories(dir);
  return std::make_shared<train::EventStreamObserver>(train::event_stream_path(dir, rank), rank);
}

// A rank of an elastic job (train/elastic_run.h): no fixed world; the membership rounds
// give it one, again after every change.
void run_elastic_train(const TrainFlags& f, const train::TrainConfig& config,
                       const launch::RankEnv& env, const launch::GetEnv& getenv,
                       const std::string& resume_dir) {
  BRAID_CHECK(f.init_from.empty(), "--init-from is not supported in an elastic job yet");
  launch::JoinOptions join;
  join.getenv = getenv;
  launch::ElasticJob job = launch::join_elastic_job(join);
  train::ElasticSetup setup;
  setup.store = job.job.store.get();
  setup.member = job.member;
  setup.timeout = job.group_options.timeout;
  setup.connect = [&](const comm::Round& round) {
    // Every member asked for this round, so connecting is quick; one that dies meanwhile
    // must not hold the others for the job's whole deadline.
    return launch::connect_round(
        job, round,
        comm::Deadline::after(std::min(job.group_options.timeout,
                                       std::chrono::milliseconds(std::chrono::seconds(20)))));
  };
  setup.launch_world = env.world_size;
  setup.resume_dir = resume_dir;
  setup.on_first_trainer = [&](train::Trainer& t) { prepare_outputs(f, t, config); };
  // Under braid worker: this process's events, one stream across its rounds.
  if (const auto events = event_stream(getenv, env.rank))
    setup.on_every_trainer = [events](train::Trainer& t) { t.add_observer(events); };
  const train::StopOnSignal stop_on_signal;
  const train::RunOutcome outcome = train::run_elastic(config, setup);
  report(outcome, false, config);
}

void run_train(const TrainFlags& f) {
  // A parameter-server job names each process's role (braid launch --servers/--workers,
  // TF_CONFIG, --cluster or DMLC_*).
  const std::optional<launch::ClusterSpec> cluster =
      f.cluster.empty() ? launch::read_cluster_spec()
                        : std::optional<launch::ClusterSpec>(launch::read_cluster_file(f.cluster));
  const launch::GetEnv job_getenv = cluster ? launch::job_env(*cluster) : launch::GetEnv(::getenv);
  const launch::RankEnv env = launch::read_rank_env(job_getenv);
  set_log_rank(env.rank);  // info lines from rank 0 only (core/log.h)
  BRAID_CHECK(f.resume.empty() || f.init_from.empty(),
              "--resume continues a run (weights, optimizer, step); --init-from starts a new one "
              "from weights alone: pass one of them");
  std::string resume_dir = f.resume.empty() ? "" : train::find_checkpoint_dir(f.resume);
  RunPlace place;
  place.world = env.world_size;
  if (cluster) place.ps_workers = cluster->num_workers;
  // Restarted by torchrun's elastic agent (every worker is, after any failure): the run goes
  // on from its own last checkpoint, as a PyTorchJob expects of its workers.
  const int torchrun_restarts = launch::torchrun_restart_count(job_getenv);
  bool auto_resumed = false;
  if (resume_dir.empty() && torchrun_restarts > 0) {
    const std::string out = resolve(f, "", place).out;
    if (fs::exists(fs::path(out) / "checkpoint" / "state.json")) {
      resume_dir = train::find_checkpoint_dir(out);
      auto_resumed = true;
      log_info("restart ", torchrun_restarts,
               " under torchrun (TORCHELASTIC_RESTART_COUNT): "
               "resuming from ",
               resume_dir);
    }
  }
  // strategy auto with plan.cluster: the planner's choice, the same on every rank.
  const train::TrainConfig config = cluster
                                        ? resolve(f, resume_dir, place)
                                        : apply_plan(resolve(f, resume_dir, place), place.world);
  // A resume continues the run it was given; into another --out it is a new run there, and
  // must not replace or append to what that directory holds.
  const bool continues = !resume_dir.empty() && fs::exists(config.out) &&
                         fs::equivalent(config.out, run_dir_of(resume_dir));
  // A rank of an elastic job restarted or added while it runs joins the job's own run.
  const bool elastic = !cluster && launch::elastic_requested(job_getenv);
  const char* restarts = job_getenv("BRAID_RESTART_COUNT");
  // A parameter-server job whose launcher restarts its dead processes, and whether this
  // process is such a restart (it joins the running job instead of starting it).
  const launch::PsRestartEnv ps_restarts =
      cluster ? launch::read_ps_restart_env(job_getenv) : launch::PsRestartEnv{};
  const int incarnation = ps_restarts.enabled() ? ps_restarts.incarnation : 0;
  const bool joins_running_job =
      incarnation > 0 || (elastic && (job_getenv("BRAID_ELASTIC_MEMBER") == nullptr ||
                                      (restarts != nullptr && std::string(restarts) != "0")));
  const std::string existing = existing_outputs(config.out);
  if (!existing.empty() && !continues && !f.overwrite && !joins_running_job)
    BRAID_THROW(Error, "--out '", config.out, "' already holds a run (", existing,
                resume_dir.empty() ? "); pass --resume " + config.out + " to continue it, "
                                   : "), not the one being resumed ('" + resume_dir + "'); pass ",
                "--overwrite to replace it, or another --out");
  set_blas_threads(config.threads);
  log_info(blas_config());
  // Every process of a job (servers and evaluator too) refuses what the strategy cannot run
  // before they meet: all alike, none left waiting in a collective for one that stopped.
  // An elastic job's size is known once it forms; its ranks check as they build the trainer.
  const parallel::PsLayout layout =
      cluster ? parallel::PsLayout{cluster->num_workers, cluster->num_servers,
                                   cluster->has_evaluator ? 1 : 0, incarnation}
              : parallel::PsLayout{};
  if (!elastic)
    train::check_strategy(config, env.world_size, cluster ? std::optional(layout) : std::nullopt);
  // In a job (braid launch, torchrun, mpirun, srun): meet the other ranks first; the
  // strategy (config.strategy, ddp by default) runs over the world group. Every rank
  // checked the outputs above before any could write: building the trainer is collective.
  if (elastic) return run_elastic_train(f, config, env, job_getenv, resume_dir);
  std::optional<launch::Job> job;
  if (env.world_size > 1 || cluster) {
    launch::JoinOptions join;
    join.getenv = job_getenv;
    if (incarnation > 0) {
      // The others run already: no collective, not even the config's check (a restart runs
      // the first start's command line).
      job.emplace(launch::rejoin_ps_job(join, incarnation));
    } else {
      job.emplace(launch::join_job(join));
      // Every rank, servers included, trains or serves under one config.
      train::check_same_config(*job->world, config);
    }
  }
  std::shared_ptr<parallel::PsRestarts> ps_restart_log;
  if (cluster && ps_restarts.enabled())
    ps_restart_log = std::make_shared<parallel::PsRestarts>(
        job->store, launch::transport_store(*job), job->world->size());
  if (cluster && cluster->role == launch::Role::server)
    return run_server(config, *cluster, *job, layout, resume_dir, ps_restart_log);
  train::Trainer trainer = cluster ? train::Trainer(config, job->world, layout)
                           : job   ? train::Trainer(config, job->world)
                                   : train::Trainer(config);
  if (ps_restart_log)
    if (auto* worker = dynamic_cast<parallel::PsWorker*>(&trainer.strategy()))
      worker->set_restarts(ps_restart_log);
  if (incarnation > 0) rejoin_as_worker(trainer, config, incarnation);
  if (!resume_dir.empty()) {
    trainer.load_checkpoint(resume_dir);
    log_info("resumed from ", resume_dir, " at step ", trainer.global_step());
  }
  if (!f.init_from.empty()) {
    trainer.load_weights(f.init_from, train::parse_name_map(f.rename));
    log_info("initialised the weights from ", f.init_from);
  }
  prepare_outputs(f, trainer, config, auto_resumed || incarnation > 0);
  if (const auto events = event_stream(job_getenv, env.rank)) trainer.add_observer(events);
  const train::StopOnSignal stop_on_signal;
  try {
    report(trainer.run(), trainer.writes_outputs(), config);
  } catch (const CLI::RuntimeError&) {
    throw;  // the exit code of a stop by signal (report()), not an error to print
  } catch (const std::exception& e) {
    // Said before the trainer goes: a parameter-server worker tells the servers it failed as
    // it is destroyed, and the launcher may stop this process right after.
    report_error_now(e);
    throw;
  }
}

struct EvalFlags {
  std::string checkpoint, data_dir, model, config;
  int64_t batch = 0;
  bool ema = false;
};

// The config to evaluate under: the checkpoint's own, then --config, then --model. A bare
// safetensors file carries no config, so it needs --model or --config.
train::TrainConfig eval_config(const EvalFlags& f, const std::string& checkpoint_dir) {
  json j = json::object();
  if (!checkpoint_dir.empty()) {
    const json ts = train::read_train_state(checkpoint_dir);
    BRAID_CHECK(ts.contains("config") && ts["config"].is_object(), "checkpoint '", checkpoint_dir,
                "/state.json' holds no training config; pass --model or --config");
    j = ts["config"];
  } else if (f.model.empty() && f.config.empty()) {
    BRAID_THROW(
        Error, "'", f.checkpoint,
        "' is a bare safetensors file, which holds weights but not the architecture: "
        "pass --model (mlp, cnn, cnn-bn, gpt-tiny, gpt-small or a JSON model spec) or --config "
        "(the run's config.json)");
  }
  if (!f.config.empty()) overlay(j, train::read_config_file(f.config));
  if (!f.model.empty()) {
    if (f.model.ends_with(".json") && fs::exists(f.model)) {
      std::ifstream in(f.model);
      try {
        j["model"] = json::parse(in);
      } catch (const json::parse_error& e) {
        BRAID_THROW(Error, "model spec '", f.model, "': not valid JSON: ", e.what());
      }
    } else {
      j["model"] = f.model;
    }
  }
  if (f.batch > 0) j["batch"] = f.batch;
  if (!f.data_dir.empty()) j["data_dir"] = f.data_dir;
  // One process evaluates, whichever strategy trained the weights (ZeRO, pipeline, tensor
  // and mesh runs too); checkpoints hold the full layout, so any strategy's load here.
  drop_distribution(j);
  j["strategy"] = "single";
  return train::config_from_json(j);
}

void run_eval(const EvalFlags& f) {
  // A run directory, a checkpoint directory, or one safetensors file of weights.
  const bool bare_file = fs::is_regular_file(f.checkpoint);
  const std::string dir = bare_file ? "" : train::find_checkpoint_dir(f.checkpoint);
  BRAID_CHECK(!(bare_file && f.ema), "--ema evaluates a checkpoint directory's weight average; '",
              f.checkpoint, "' is a single file: drop --ema, or pass the file itself");
  const train::TrainConfig config = eval_config(f, dir);
  set_blas_threads(config.threads);
  train::Trainer trainer(config);
  if (bare_file) {
    trainer.load_weights(f.checkpoint);
  } else if (f.ema) {
    const std::string path = dir + "/ema.safetensors";
    BRAID_CHECK(fs::exists(path), "checkpoint '", dir,
                "' holds no weight average (ema.safetensors); train with --ema-decay to keep one, "
                "or drop --ema");
    trainer.load_weights(path);
  } else {
    trainer.load_weights(dir);
  }
  const train::EvalResult r = trainer.evaluate();
  if (trainer.model().task == train::Task::language_model)
    std::printf("validation loss %.4f (%.4f bits/byte) over %lld predicted bytes\n", r.loss,
                r.loss / std::log(2.0), static_cast<long long>(r.samples));
  else if (r.mse)  // a regression loss: no accuracy to speak of
    std::printf("test loss %.4f mse %.6g mae %.6g over %lld samples\n", r.loss, *r.mse,
                r.mae.value_or(0), static_cast<long long>(r.samples));
  else if (r.label_accuracy)
    std::printf("test loss %.4f label accuracy %.4f over %lld samples\n", r.loss, *r.label_accuracy,
                static_cast<long long>(r.samples));
  else
    std::printf("test loss %.4f accuracy %.4f over %lld samples\n", r.loss, r.accuracy,
                static_cast<long long>(r.samples));
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model (data-parallel when a launcher starts several ranks)");
  cmd->add_option("--config", flags->config,
                  "JSON config file (flags override it; with --resume, it overrides the "
                  "checkpoint's config)");
  cmd->add_option("--deepspeed", flags->deepspeed,
                  "a DeepSpeed config (ds_config.json): its batch sizes, optimizer, fp16/bf16, "
                  "ZeRO stage and clipping laid over --config (a key both set differently is "
                  "an error; flags still win); keys braid cannot honour are refused by name");
  flags->apply_settings = add_setting_flags(cmd);
  cmd->add_option("--resume", flags->resume,
                  "continue from this checkpoint (or run) directory, under its saved config");
  cmd->add_option("--init-from", flags->init_from,
                  "start from these weights: a safetensors file (a PyTorch state_dict or a "
                  "braid model.safetensors) or a checkpoint directory");
  cmd->add_option("--rename", flags->rename,
                  "with --init-from: FROM=TO renames the file's tensors whose names start with "
                  "FROM (a PyTorch state_dict's 'fc1.' as braid's '1.'); repeat it, or give a "
                  ".json file of {\"FROM\": \"TO\"}")
      ->needs("--init-from");
  cmd->add_option("--cluster", flags->cluster,
                  "a parameter-server job's cluster spec: TF_CONFIG's JSON in a file "
                  "({\"cluster\": {\"worker\": [...], \"ps\": [...]}, \"task\": {...}})");
  cmd->add_flag("--overwrite", flags->overwrite,
                "replace the checkpoint and metrics a run already left in --out");
  cmd->callback([flags] { run_train(*flags); });
}

void add_eval_command(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint on the test split");
  cmd->add_option("--checkpoint", flags->checkpoint,
                  "a run directory, its checkpoint directory, or a safetensors file of weights "
                  "(then with --model or --config)")
      ->required();
  cmd->add_option(
      "--model", flags->model,
      "the architecture (mlp, cnn, cnn-bn, gpt-tiny, gpt-small or a JSON model spec file)");
  cmd->add_option("--config", flags->config, "a config file giving the model and the data");
  cmd->add_option("--batch", flags->batch, "evaluation batch size (default: the run's)");
  cmd->add_option("--data-dir", flags->data_dir, "Fashion-MNIST directory (default: the run's)");
  cmd->add_flag("--ema", flags->ema, "evaluate the checkpoint's weight average (ema.safetensors)");
  cmd->callback([flags] { run_eval(*flags); });
}

}  // namespace braid::cli
