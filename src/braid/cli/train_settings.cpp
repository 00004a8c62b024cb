// The setting flags of `braid train` (see train_settings.h).
#include "cli/train_settings.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace braid::cli {
namespace {

struct TrainFlags {
  std::string model, dataset, data_dir, out, optimizer, schedule;
  int64_t epochs = 0, steps = 0, batch = 0, seq_len = 0, log_every = 0, eval_every = 0,
          checkpoint_every = 0, warmup = 0, crop_pad = 0;
  uint64_t seed = 0;
  int threads = 0;
  double lr = 0, weight_decay = 0, momentum = 0, clip = 0, erase = 0, label_smoothing = 0,
         ema_decay = 0;
  bool flip = false;
};

}  // namespace

std::function<void(nlohmann::json& j)> add_setting_flags(CLI::App* cmd) {
  auto flags = std::make_shared<TrainFlags>();
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
  return [cmd, flags](nlohmann::json& j) {
    const TrainFlags& f = *flags;
    auto given = [&](const char* name) { return cmd->count(name) > 0; };
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
  };
}

}  // namespace braid::cli
