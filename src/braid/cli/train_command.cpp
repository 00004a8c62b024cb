// `braid train`: a training run from a JSON config and/or flags (flags win), and
// `braid eval`: test loss and accuracy of a checkpoint.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/train_settings.h"
#include "core/gemm.h"
#include "core/log.h"
#include "train/config.h"
#include "train/trainer.h"

namespace braid::cli {
namespace {

struct TrainFlags {
  std::string config, resume;
  std::function<void(nlohmann::json&)> apply_settings;
};

// Flags become a JSON object laid over the config file's, so both go through one
// validation path and name keys the same way.
train::TrainConfig resolve(const TrainFlags& f) {
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
  f.apply_settings(j);
  try {
    return train::config_from_json(j);
  } catch (const Error& e) {
    if (f.config.empty()) throw;
    BRAID_THROW(Error, f.config, " (with flags): ", e.what());
  }
}

void run_train(const TrainFlags& f) {
  const train::TrainConfig config = resolve(f);
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
  flags->apply_settings = add_setting_flags(cmd);
  cmd->add_option("--resume", flags->resume, "continue from this checkpoint directory");
  cmd->callback([flags] { run_train(*flags); });
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
