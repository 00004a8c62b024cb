// Trainer's checkpoints: what the training state records beside the tensors, and the checks
// a resume makes on it before anything changes (see trainer.h and checkpoint.h).
#include <filesystem>

#include "core/log.h"
#include "data/loader.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "parallel/strategy.h"
#include "train/checkpoint.h"
#include "train/kernel_record.h"
#include "train/name_map.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using nlohmann::json;

// train_state[key] (or train_state.loader[key]) as an integer >= 0, else an Error naming
// the file and the field.
int64_t read_count(const json& object, const char* key, const std::string& field,
                   const std::string& file) {
  const json& v = object.is_object() ? object.value(key, json()) : json();
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    BRAID_THROW(Error, "checkpoint '", file, "': ", field, " is ", v.dump(),
                "; it must be an integer >= 0 (the file was edited or is corrupt)");
  return v.get<int64_t>();
}

}  // namespace

int64_t Trainer::global_batch() const {
  return config_.global_batch > 0 ? config_.global_batch : config_.batch * data_world_;
}

int64_t Trainer::steps_into_epoch(const data::LoaderState& state) const {
  return state.position + train_loader_->batches_per_epoch() -
         train_loader_->batches_from(state.offset);
}

// Where this rank's loader stands after a checkpoint's samples: the same global sample,
// counted in steps of this run's global batch. Under global_batch a step is the same block
// of the epoch's order at every world size (data/sampler.h), so a checkpoint of the same
// global_batch stands as recorded whatever its world size; one of another global batch
// continues at its sample, mid-step if need be (the loader's offset). Without global_batch
// a checkpoint from another world size or batch must end on a whole step of this run.
Trainer::ResumePosition Trainer::position_here(const json& ts, const std::string& file) const {
  ResumePosition r;
  const json& l = ts["loader"];
  r.position = read_count(l, "position", "train_state.loader.position", file);
  // Written only where a global batch changed mid-epoch (elastic.scale_lr).
  if (l.contains("offset")) r.offset = read_count(l, "offset", "train_state.loader.offset", file);
  if (!l.contains("samples")) return r;  // written before world sizes were recorded
  const int64_t world = read_count(l, "world_size", "train_state.loader.world_size", file);
  const int64_t batch = read_count(l, "batch", "train_state.loader.batch", file);
  r.samples = read_count(l, "samples", "train_state.loader.samples", file);
  const int64_t saved_global =
      l.contains("global_batch")
          ? read_count(l, "global_batch", "train_state.loader.global_batch", file)
          : 0;
  // The same world and batch, or the same global_batch: the position stands as recorded
  // (check_position checks it).
  if (saved_global > 0
          ? saved_global == config_.global_batch
          : config_.global_batch == 0 && world == data_world_ && batch == config_.batch)
    return r;
  const int64_t saved_step = saved_global > 0 ? saved_global : world * batch;
  const std::string saved_how = saved_global > 0 ? detail::concat("global_batch ", saved_global)
                                                 : detail::concat(world, " ranks x batch ", batch);
  BRAID_CHECK(r.samples == r.offset + r.position * saved_step, "checkpoint '", file,
              "': train_state.loader.samples ", r.samples, " is not offset ", r.offset,
              " + position ", r.position, " x ", saved_how, " (the file was edited or is corrupt)");
  r.moved = true;
  if (config_.global_batch > 0 && train_loader_) {
    const int64_t n = train_loader_->source().size();
    BRAID_CHECK(r.samples <= n, "checkpoint '", file, "': train_state.loader.samples ", r.samples,
                " is past the ", n,
                " samples of an epoch (the file was edited, or the data is not the run's)");
    const data::LoaderState here = train_loader_->state_at_sample(0, r.samples);
    r.position = here.position;
    r.offset = here.offset;
    return r;
  }
  if (r.samples % global_batch() != 0)
    BRAID_THROW(Error, "checkpoint '", file, "' stopped at sample ", r.samples, " of its epoch (",
                saved_how, "), which is not a whole ", "number of this run's global batches (",
                config_.global_batch > 0 ? detail::concat("global_batch ", global_batch())
                                         : detail::concat(data_world_, " ranks x batch ",
                                                          config_.batch, " = ", global_batch()),
                "); resume with a global batch that divides ", r.samples, ", e.g. the same ",
                saved_step, " (global_batch, or ranks x batch with accumulate_steps to fit)");
  r.position = r.samples / global_batch();
  r.offset = 0;
  return r;
}

void Trainer::save_checkpoint(const std::string& dir) const {
  BRAID_CHECK(writes_outputs(), "save_checkpoint on rank ", rank_,
              ": only rank 0 writes checkpoints");
  std::vector<NamedTensor> opt_state;
  for (const auto& [name, tensor] : strategy_->optimizer_state())
    opt_state.push_back({name, tensor});
  json state = {{"step", step_},
                {"epoch", epoch_},
                {"schedule_steps", schedule_steps()},
                {"config", to_json(config_)}};
  if (train_loader_) {
    // The position in batches of this rank, and in samples of the epoch's global order
    // (every rank together: rank r's j-th sample is global position r + world j), which
    // is what another world size or batch resumes from.
    const data::LoaderState ls = train_loader_->state();
    state["loader"] = {{"epoch", ls.epoch},
                       {"position", ls.position},
                       {"samples", train_loader_->sample_of(ls)},
                       {"world_size", data_world_},
                       {"batch", config_.batch}};
    // Where an earlier world of another global batch took part of the epoch (scale_lr).
    if (ls.offset != 0) state["loader"]["offset"] = ls.offset;
    // Steps of a global batch are the same blocks at every world size (position_here).
    if (config_.global_batch > 0) state["loader"]["global_batch"] = config_.global_batch;
    // Steps taken at another world size or batch before a resume moved the run: step =
    // loader.epoch x batches per epoch + loader.position + step_offset.
    if (step_offset_ != 0) state["step_offset"] = step_offset_;
  }
  if (average_) state["ema_updates"] = average_->updates();
  state["stop_rules"] = stop_rules_.state();
  state["kernels"] = kernel_record();  // what --resume replays: the same arithmetic
  if (const optim::LossScaler* s = strategy_->loss_scaler()) state["loss_scaler"] = s->state();
  train::save_checkpoint(dir, strategy_->params(), opt_state, state,
                         average_ ? &average_->state_dict() : nullptr);
  strategy_->save_outside(dir);
}

// Every step consumed one batch, so the step, the epoch and the loader's position must
// agree: step = loader.epoch x batches per epoch + loader.position, and the epoch is the
// loader's (or the next one, once its last batch was taken). A mismatch means an edited
// file, or data or a batch size other than the run's: resuming would silently train on
// other batches than an uninterrupted run.
void Trainer::check_position(const json& ts, const std::string& dir) const {
  const std::string file = (std::filesystem::path(dir) / "state.json").string();
  const int64_t step = read_count(ts, "step", "train_state.step", file);
  const int64_t epoch = read_count(ts, "epoch", "train_state.epoch", file);
  if (!ts.contains("loader")) return;  // written without data (benchmarks)
  const json& l = ts["loader"];
  const int64_t loader_epoch = read_count(l, "epoch", "train_state.loader.epoch", file);
  const int64_t position = read_count(l, "position", "train_state.loader.position", file);
  const int64_t per_epoch = batches_per_epoch();
  if (!train_loader_) return;
  const json& offset_json = ts.value("step_offset", json(0));
  BRAID_CHECK(offset_json.is_number_integer(), "checkpoint '", file,
              "': train_state.step_offset is ", offset_json.dump(),
              "; it must be an integer (the file was edited or is corrupt)");
  const int64_t offset = offset_json.get<int64_t>();
  const auto resumed = position_here(ts, file);
  const int64_t n = train_loader_->source().size();
  BRAID_CHECK(resumed.offset <= n && (resumed.offset == 0 || config_.global_batch > 0),
              "checkpoint '", file, "': train_state.loader.offset ", resumed.offset,
              config_.global_batch > 0
                  ? detail::concat(" is past the ", n, " samples of an epoch")
                  : std::string(" needs a global batch, and this run has none"),
              " (the file was edited, or the data or global_batch are not the run's)");
  // The batches of the checkpoint's epoch here: fewer than a whole epoch's after an offset.
  const int64_t in_epoch = train_loader_->batches_from(resumed.offset);
  if (resumed.moved) {
    // Another world size or batch: the step counts on, the data from the same sample.
    BRAID_CHECK(resumed.position <= in_epoch, "checkpoint '", file, "': sample ", resumed.samples,
                " of the epoch is past the ", in_epoch,
                " batches of an epoch at this world size and batch");
    return;
  }
  const json& saved_batch = ts.contains("config") ? ts["config"].value("batch", json()) : json();
  const std::string hint =
      config_.global_batch == 0 && saved_batch.is_number_integer() &&
              saved_batch.get<int64_t>() != config_.batch
          ? detail::concat("; the run used batch ", saved_batch.get<int64_t>(), ", this one ",
                           config_.batch, ": resume with the run's batch")
          : std::string("; was the file edited, or is the data not the run's?");
  BRAID_CHECK(position <= in_epoch, "checkpoint '", file, "': train_state.loader.position ",
              position, " is past the ", in_epoch, " batches of an epoch", hint);
  const int64_t into =
      steps_into_epoch({.epoch = loader_epoch, .position = position, .offset = resumed.offset});
  BRAID_CHECK(step == loader_epoch * per_epoch + into + offset, "checkpoint '", file,
              "': train_state.step ", step, " disagrees with train_state.loader (epoch ",
              loader_epoch, ", position ", position, " of ", in_epoch, " batches in the epoch",
              offset != 0 ? detail::concat(", after ", offset, " steps at another batch") : "",
              ": step ", loader_epoch * per_epoch + into + offset, ")", hint);
  BRAID_CHECK(epoch == loader_epoch || (epoch == loader_epoch + 1 && position == in_epoch),
              "checkpoint '", file, "': train_state.epoch ", epoch,
              " disagrees with train_state.loader.epoch ", loader_epoch, " (position ", position,
              " of ", in_epoch, ")", hint);
}

// A cosine schedule decays over its horizon; resumed over another one, the learning rate
// jumps at the resume step. Legitimate (extending a run), but never silent.
void Trainer::warn_if_horizon_changed(const json& ts, const std::string& dir) const {
  if (config_.schedule.name != "cosine") return;
  int64_t saved = 0;
  if (ts.value("schedule_steps", json()).is_number_integer()) {
    saved = ts["schedule_steps"].get<int64_t>();
  } else if (ts.contains("config") && ts["config"].is_object()) {
    // Written before schedule_steps was recorded: derive it as the constructor does.
    const json& c = ts["config"];
    const int64_t max_steps = c.value("max_steps", int64_t{0});
    saved = max_steps > 0
                ? max_steps
                : c.value("epochs", int64_t{0}) * std::max<int64_t>(1, batches_per_epoch());
  }
  const int64_t now = schedule_steps();
  if (saved <= 0 || saved == now) return;
  log_warn("checkpoint '", dir, "': its cosine schedule spans ", saved,
           " steps but this run's spans ", now,
           " (epochs or max_steps changed): the learning rate at step ", step_, " becomes ",
           schedule_->lr(step_), " instead of ", make_schedule(saved)->lr(step_),
           "; keep epochs/max_steps to continue the run's schedule unchanged");
}

void Trainer::load_checkpoint(const std::string& path) {
  const std::string dir = find_checkpoint_dir(path);
  // Federated rounds draw their clients by round number, not from the loader's position.
  const bool rounds = config_.strategy == "fedavg";
  // The recorded position is checked before the model changes.
  if (!rounds) check_position(read_train_state(dir), dir);
  strategy_->prepare_to_load();
  LoadedCheckpoint ck = train::load_checkpoint(dir, params());
  // The run's kernel choices, so the resumed steps compute its bits (older checkpoints have
  // none; a kernel_choices key given with --resume wins).
  if (ck.train_state.contains("kernels") && config_.kernel_choices.empty())
    apply_kernel_record(ck.train_state["kernels"], "checkpoint '" + dir + "' kernels");
  optim::NamedTensors opt_state;
  for (auto& t : ck.optimizer_state) opt_state.emplace_back(t.name, t.tensor);
  strategy_->load_optimizer_state(opt_state);
  // Every rank read the same files; rank 0's copy is the one all continue from.
  strategy_->sync_parameters();
  step_ = ck.train_state.at("step").get<int64_t>();
  epoch_ = ck.train_state.at("epoch").get<int64_t>();
  if (train_loader_ && ck.train_state.contains("loader") && !rounds) {
    const auto& l = ck.train_state["loader"];
    const ResumePosition here = position_here(ck.train_state, dir + "/state.json");
    const data::LoaderState ls{
        .epoch = l.at("epoch").get<int64_t>(), .position = here.position, .offset = here.offset};
    if (here.moved)
      log_info("checkpoint '", dir, "' was written by ", l.at("world_size").get<int64_t>(),
               " ranks x batch ", l.at("batch").get<int64_t>(), "; this run (",
               config_.global_batch > 0
                   ? detail::concat("global_batch ", config_.global_batch)
                   : detail::concat(data_world_, " ranks x batch ", config_.batch),
               ") continues its epoch ", ls.epoch, " at batch ", ls.position, " (sample ",
               l.at("samples").get<int64_t>(),
               ls.offset != 0 ? detail::concat(", its steps shifted by ", ls.offset) : "", ")");
    step_offset_ = step_ - (ls.epoch * train_loader_->batches_per_epoch() + steps_into_epoch(ls));
    // At the epoch's very end too (a checkpoint_every step that ended it): the loader then
    // ends the epoch at once, rather than the epoch being taken again.
    if (ls.epoch == epoch_ && (ls.position > 0 || ls.offset > 0)) {
      train_loader_->restore(ls);
      resume_mid_epoch_ = true;
    }
  }
  if (!rounds) warn_if_horizon_changed(ck.train_state, dir);
  if (optim::LossScaler* s = strategy_->loss_scaler(); s && ck.train_state.contains("loss_scaler"))
    s->load(ck.train_state["loss_scaler"], dir + "/state.json");
  // Absent from checkpoints older than the rules: they start afresh.
  stop_rules_.load(ck.train_state.value("stop_rules", json()), dir + "/state.json");
  if (average_ && !ck.averaged_model.empty()) {
    const nlohmann::json& n = ck.train_state.value("ema_updates", nlohmann::json());
    BRAID_CHECK(n.is_number_integer(), "checkpoint '", dir,
                "': it holds a weight average but state.json has no integer 'ema_updates'");
    average_->load(ck.averaged_model, n.get<int64_t>(), "checkpoint '" + dir + "/ema.safetensors'");
  } else if (average_) {
    // The earlier run kept no average: start it at the loaded weights.
    average_ = std::make_unique<WeightAverage>(params(), config_.ema_decay);
    log_warn("checkpoint '", dir, "' holds no weight average; the average starts at step ", step_);
  } else if (!ck.averaged_model.empty()) {
    log_warn("checkpoint '", dir, "' holds a weight average, which this run (ema_decay 0) drops");
  }
}

void Trainer::continue_at(int64_t step) {
  BRAID_CHECK(step >= 0, "continue_at: step ", step);
  step_ = step;
  step_offset_ = 0;
  resume_mid_epoch_ = false;
  const int64_t per_epoch = batches_per_epoch();
  if (!train_loader_ || per_epoch <= 0) return;
  epoch_ = step / per_epoch;
  const int64_t position = step % per_epoch;
  if (position > 0) {
    train_loader_->restore({epoch_, position});
    resume_mid_epoch_ = true;
  }
}

void Trainer::load_weights(const std::string& path, const NameMap& rename) {
  strategy_->prepare_to_load();
  const std::string file =
      std::filesystem::is_directory(path) ? find_checkpoint_dir(path) + "/model.safetensors" : path;
  const std::string source = "safetensors file '" + file + "'";
  copy_named_tensors(rename_tensors(read_safetensors(file).tensors, rename, source),
                     state_dict(params()), source);
  strategy_->sync_parameters();
}

}  // namespace braid::train
