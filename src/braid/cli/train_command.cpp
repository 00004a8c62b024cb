// `braid train`: a training run from a JSON config and/or flags (flags win), and
// `braid eval`: test loss and accuracy of a checkpoint.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "core/gemm.h"
#include "core/log.h"
#include "train/config.h"
#include "train/trainer.h"

namespace braid::cli {
namespace {

struct TrainFlags {
  std::string config, model, dataset, data_dir, out, resume, optimizer, schedule;
  int64_t epochs = 0, steps = 0, batch = 0, seq_len = 0, log_every = 0, eval_every = 0,
          checkpoint_every = 0, warmup = 0, crop_pad = 0;
  uint64_t seed = 0;
  int threads = 0;
  double lr = 0, weight_decay = 0, momentum = 0, clip = 0, erase = 0, label_smoothing = 0,
         ema_decay = 0;
  bool flip = false;
};

// Flags become a JSON object laid over the config file's, so both go through one
// validation path and name keys the same way.
train::TrainConfig resolve(const CLI::App& cmd, const TrainFlags& f) {
  nlohmann::json j = nlohmann::json::object();
  if (!f.config.empty()) {
    std::ifstream in(f.config);
    if (!in) BRAID_THROW(IoError, "config '", f.config, "': cannot open it");
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      BRAID_THROW(Error, "config '", f.config, "': not valid JSON: ", e.what());
    }
  }
  auto given = [&](const char* name) { return cmd.count(name) > 0; };
  if (given("--model")) {
    // A path to a JSON model spec, or a built-in name.
    if (std::filesystem::exists(f.model) && f.model.ends_with(".json")) {
      std::ifstream in(f.model);
      j["model"] = nlohmann::json::parse(in);
    } else {
      j["model"] = f.model;
    }
  }
  if (given("--dataset")) j["dataset"] = f.dataset;
  if (given("--data-dir")) j["data_dir"] = f.data_dir;
  if (given("--out")) j["out"] = f.out;
  if (given("--epochs")) j["epochs"] = f.epochs;
  if (given("--steps")) j["max_steps"] = f.steps;
  if (given("--batch")) j["batch"] = f.batch;
  if (given("--seq-len")) j["seq_len"] = f.seq_len;
  if (given("--seed")) j["seed"] = f.seed;
  if (given("--threads")) j["threads"] = f.threads;
  if (given("--log-every")) j["log_every"] = f.log_every;
  if (given("--eval-every")) j["eval_every"] = f.eval_every;
  if (given("--checkpoint-every")) j["checkpoint_every"] = f.checkpoint_every;
  if (given("--clip")) j["clip_grad_norm"] = f.clip;
  if (given("--flip")) j["augment_flip"] = f.flip;
  if (given("--crop-pad")) j["augment_crop_pad"] = f.crop_pad;
  if (given("--erase")) j["augment_erase"] = f.erase;
  if (given("--label-smoothing")) j["label_smoothing"] = f.label_smoothing;
  if (given("--ema-decay")) j["ema_decay"] = f.ema_decay;
  if (given("--optimizer")) j["optimizer"]["name"] = f.optimizer;
  if (given("--lr")) j["optimizer"]["lr"] = f.lr;
  if (given("--weight-decay")) j["optimizer"]["weight_decay"] = f.weight_decay;
  if (given("--momentum")) j["optimizer"]["momentum"] = f.momentum;
  if (given("--schedule")) j["schedule"]["name"] = f.schedule;
  if (given("--warmup")) j["schedule"]["warmup_steps"] = f.warmup;
  try {
    return train::config_from_json(j);
  } catch (const Error& e) {
    if (f.config.empty()) throw;
    BRAID_THROW(Error, f.config, " (with flags): ", e.what());
  }
}

void run_train(const CLI::App& cmd, const TrainFlags& f) {
  const train::TrainConfig config = resolve(cmd, f);
  set_blas_threads(config.threads);
  log_info(blas_config());
  train::Trainer trainer(config);
  if (!f.resume.empty()) {
    trainer.load_checkpoint(f.resume);
    log_info("resumed from ", f.resume, " at step ", trainer.global_step());
  }
  std::filesystem::create_directories(config.out);
  std::ofstream(config.out + "/config.json") << train::to_json(config).dump(2) << "\n";
  trainer.run();
}

void run_eval(const std::string& checkpoint, int64_t batch, const std::string& data_dir,
              bool averaged) {
  std::ifstream in(checkpoint + "/state.json");
  if (!in)
    BRAID_THROW(IoError, "checkpoint '", checkpoint,
                "': no state.json there; pass the checkpoint directory that braid train wrote "
                "(DIR/checkpoint)");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    BRAID_THROW(Error, "checkpoint '", checkpoint, "/state.json': not valid JSON: ", e.what());
  }
  BRAID_CHECK(state.contains("train_state") || state.contains("config"), "checkpoint '", checkpoint,
              "/state.json' holds no training config");
  const nlohmann::json& ts = state.contains("train_state") ? state["train_state"] : state;
  train::TrainConfig config = train::config_from_json(ts.at("config"));
  if (batch > 0) config.batch = batch;
  if (!data_dir.empty()) config.data_dir = data_dir;
  set_blas_threads(config.threads);
  train::Trainer trainer(config);
  if (averaged) {
    const std::string path = checkpoint + "/ema.safetensors";
    BRAID_CHECK(std::filesystem::exists(path), "checkpoint '", checkpoint,
                "' holds no weight average (ema.safetensors); train with --ema-decay to keep one, "
                "or drop --ema");
    trainer.load_weights(path);
  } else {
    trainer.load_weights(checkpoint);
  }
  const train::EvalResult r = trainer.evaluate();
  if (trainer.model().task == train::Task::language_model)
    std::printf("validation loss %.4f (%.4f bits/byte) over %lld windows\n", r.loss,
                r.loss / std::log(2.0), static_cast<long long>(r.samples));
  else
    std::printf("test loss %.4f accuracy %.4f over %lld samples\n", r.loss, r.accuracy,
                static_cast<long long>(r.samples));
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model (single process)");
  cmd->add_option("--config", flags->config, "JSON config file (flags override it)");
  cmd->add_option("--model", flags->model,
                  "built-in model (mlp, cnn, cnn-bn, gpt-tiny) or a JSON model spec file");
  cmd->add_option("--dataset", flags->dataset, "fashion-mnist, npy or text");
  cmd->add_option("--data-dir", flags->data_dir, "Fashion-MNIST directory");
  cmd->add_option("--epochs", flags->epochs, "epochs to train");
  cmd->add_option("--steps", flags->steps, "stop after this many steps (0: no limit)");
  cmd->add_option("--batch", flags->batch, "batch size");
  cmd->add_option("--seq-len", flags->seq_len, "context length for text");
  cmd->add_option("--lr", flags->lr, "learning rate");
  cmd->add_option("--optimizer", flags->optimizer,
                  "sgd, adam, adamw, rmsprop, adagrad, lars, lamb");
  cmd->add_option("--weight-decay", flags->weight_decay, "weight decay");
  cmd->add_option("--momentum", flags->momentum, "momentum (sgd, rmsprop, lars)");
  cmd->add_option("--schedule", flags->schedule, "constant, step or cosine");
  cmd->add_option("--warmup", flags->warmup, "linear warm-up steps");
  cmd->add_option("--clip", flags->clip, "clip gradients to this global norm (0: off)");
  cmd->add_flag("--flip", flags->flip, "augment: random horizontal flips");
  cmd->add_option("--crop-pad", flags->crop_pad, "augment: random crops after padding by N");
  cmd->add_option("--erase", flags->erase, "augment: random erasing with this probability");
  cmd->add_option("--label-smoothing", flags->label_smoothing,
                  "cross-entropy label smoothing eps in [0, 1)");
  cmd->add_option("--ema-decay", flags->ema_decay,
                  "also evaluate an exponential moving average of the weights (0: off)");
  cmd->add_option("--seed", flags->seed, "random seed");
  cmd->add_option("--threads", flags->threads, "BLAS threads");
  cmd->add_option("--out", flags->out, "output directory (metrics.jsonl, checkpoint/)");
  cmd->add_option("--log-every", flags->log_every, "steps between progress lines");
  cmd->add_option("--eval-every", flags->eval_every, "steps between evaluations (0: each epoch)");
  cmd->add_option("--checkpoint-every", flags->checkpoint_every,
                  "steps between checkpoints (0: each epoch)");
  cmd->add_option("--resume", flags->resume, "continue from this checkpoint directory");
  cmd->callback([cmd, flags] { run_train(*cmd, *flags); });
}

void add_eval_command(CLI::App& app) {
  struct EvalFlags {
    std::string checkpoint, data_dir;
    int64_t batch = 0;
    bool ema = false;
  };
  auto flags = std::make_shared<EvalFlags>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint on the test split");
  cmd->add_option("--checkpoint", flags->checkpoint, "checkpoint directory")->required();
  cmd->add_option("--batch", flags->batch, "evaluation batch size (default: the run's)");
  cmd->add_option("--data-dir", flags->data_dir, "Fashion-MNIST directory (default: the run's)");
  cmd->add_flag("--ema", flags->ema, "evaluate the checkpoint's weight average (ema.safetensors)");
  cmd->callback(
      [flags] { run_eval(flags->checkpoint, flags->batch, flags->data_dir, flags->ema); });
}

}  // namespace braid::cli
