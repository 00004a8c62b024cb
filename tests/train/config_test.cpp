#include "train/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "optim/sgd.h"
#include "temp_dir.h"
#include "train/recipes.h"
#include "train/settings.h"
#include "train/strategy_setup.h"

namespace braid::train {
namespace {

using nlohmann::json;

std::string error_of(const json& j) {
  try {
    config_from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The error config_from_json gives for `json_text` contains `message`.
void expect_error(const std::string& json_text, const std::string& message) {
  const std::string e = error_of(json::parse(json_text));
  EXPECT_NE(e.find(message), std::string::npos) << json_text << " gave: '" << e << "'";
}

TEST(Config, ReadsKnownKeysAndKeepsDefaults) {
  const TrainConfig c = config_from_json(
      json::parse(R"({"model": "mlp", "batch": 64, "optimizer": {"name": "adamw", "lr": 0.001}})"));
  EXPECT_EQ(c.model, "mlp");
  EXPECT_EQ(c.batch, 64);
  EXPECT_EQ(c.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.001);
  EXPECT_EQ(c.epochs, 1);
}

TEST(Config, UnknownKeyIsNamedWithAcceptedKeys) {
  const std::string e = error_of(json::parse(R"({"batchsize": 3})"));
  EXPECT_NE(e.find("unknown key 'batchsize'"), std::string::npos) << e;
  EXPECT_NE(e.find("batch"), std::string::npos) << e;
  const std::string nested = error_of(json::parse(R"({"optimizer": {"zzz_top": 3}})"));
  EXPECT_NE(nested.find("'optimizer.zzz_top'"), std::string::npos) << nested;
  EXPECT_NE(nested.find("accepted in 'optimizer': name, lr, momentum"), std::string::npos)
      << nested;
}

TEST(Config, UnknownKeySuggestsTheClosestKey) {
  expect_error(R"({"max_step": 3})", "config: unknown key 'max_step'; did you mean 'max_steps'?");
  expect_error(R"({"optimizer": {"lrr": 0.1}})",
               "unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?");
  expect_error(R"({"optimizer": {"learning_rate": 0.1}})", "did you mean 'optimizer.lr'?");
  expect_error(R"({"lr": 0.1})", "unknown key 'lr'; did you mean 'optimizer.lr'?");
  expect_error(R"({"schedule": {"warmup": 5}})", "did you mean 'schedule.warmup_steps'?");
  expect_error(R"({"steps": 5})", "did you mean 'max_steps'?");
  expect_error(R"({"optimiser": {"lr": 0.1}})", "did you mean 'optimizer'?");
  expect_error(R"({"optimizer": {"learnign_rat": 0.1}})", "did you mean 'optimizer.lr'?");
  expect_error(R"({"optimizer": {"warmup_steps": 5}})", "did you mean 'schedule.warmup_steps'?");
  expect_error(R"({"optimizer": {"name": "adamww"}})", "did you mean 'adamw'?");
}

TEST(Config, WrongTypeAndBadValuesNameTheKey) {
  expect_error(R"({"batch": "big"})",
               "'batch' must be positive and at most 2147483647 (an integer), got \"big\"");
  expect_error(R"({"batch": 0})", "'batch' must be positive");
  expect_error(R"({"optimizer": {"name": "adamax"}})",
               "'optimizer.name' is \"adamax\"; did you mean 'adam'? accepted: sgd");
  expect_error(R"({"dataset": "npy"})", "'npy' needs 4 paths");
  for (const char* decay : {R"({"ema_decay": 1.0})", R"({"ema_decay": -0.1})"})
    expect_error(decay, "'ema_decay' must be in [0, 1)");
  expect_error(R"({"optimizer": "adam"})", "'optimizer' must be a JSON object");
  expect_error(R"({"augment_flip": 1})", "'augment_flip' must be true or false, got 1");
}

// Each of these reached the trainer and became "internal error" (exit 70), a silent
// truncation or a wrapped-around number.
TEST(Config, IntegersRefuseFractionsAndOutOfRangeValues) {
  expect_error(R"({"batch": 2.5})",
               "config: 'batch' must be positive and at most 2147483647 (an integer), got 2.5");
  expect_error(R"({"batch": 1e20})",
               "'batch' must be positive and at most 2147483647 (an integer), got 1e+20");
  expect_error(R"({"batch": 4294967296})",
               "'batch' must be positive and at most 2147483647 (an integer), got 4294967296");
  expect_error(R"({"batch": -3})", "got -3");
  expect_error(R"({"seed": 18446744073709551615})", "'seed' must be >= 0");
  expect_error(R"({"schedule": {"warmup_steps": 0.5}})", "'schedule.warmup_steps' must be >= 0");
  // An integral float is the integer it spells.
  EXPECT_EQ(config_from_json(json::parse(R"({"max_steps": 1e3})")).max_steps, 1000);
}

// bucket_mb becomes a size_t of bytes: 1e-9 MiB would be 0 bytes, 1e30 MiB past size_t.
TEST(Config, BucketSizeIsBoundedBothWays) {
  expect_error(R"({"bucket_mb": 1e-9})", "'bucket_mb' must be in [0.001, 1048576]");
  expect_error(R"({"bucket_mb": 1e30})", "'bucket_mb' must be in [0.001, 1048576]");
  expect_error(R"({"bucket_mb": 0})", "'bucket_mb' must be in [0.001, 1048576]");
  EXPECT_EQ(config_from_json(json::parse(R"({"bucket_mb": 0.25})")).bucket_mb, 0.25);
  EXPECT_EQ(config_from_json(json::parse(R"({"bucket_mb": 1048576})")).bucket_mb, 1048576);
}

TEST(Config, TopLevelMustBeAnObject) {
  expect_error("[1, 2]", "config: the top level must be a JSON object");
  expect_error("[1, 2]", "got array");
  expect_error("3", "got number");
}

TEST(Config, NumbersPastDoubleOrNotFiniteAreRefused) {
  const testing::TempDir tmp;
  const std::string path = tmp.path() + "/c.json";
  std::ofstream(path) << R"({"optimizer": {"lr": 1e400}})";
  try {
    load_config_file(path);
    ADD_FAILURE() << "1e400 accepted";
  } catch (const IoError& e) {
    ADD_FAILURE() << e.what();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("c.json': not valid JSON"), std::string::npos) << m;
    EXPECT_NE(m.find("1e400"), std::string::npos) << m;
  }
  // A struct built in C++ goes through the same checks.
  TrainConfig c;
  c.optimizer.lr = std::numeric_limits<double>::infinity();
  try {
    validate(c);
    ADD_FAILURE() << "lr inf accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'optimizer.lr' must be positive (a finite number), got "),
              std::string::npos)
        << e.what();
  }
  c.optimizer.lr = std::nan("");
  EXPECT_THROW(validate(c), Error);
}

TEST(Config, ThreadsAreBounded) {
  expect_error(R"({"threads": 100000})",
               "config: 'threads' must be positive and at most 1024 (an integer), got 100000");
  expect_error(R"({"threads": 0})", "'threads' must be positive");
  EXPECT_EQ(config_from_json(json::parse(R"({"threads": 1024})")).threads, 1024);
}

TEST(Config, ModelSpecIsCheckedWithTheConfig) {
  expect_error(R"({"model": {"input": [28, 28, 1], "layers": [
                  {"type": "conv2d", "out_channels": 4, "kernel": 3},
                  {"type": "linear", "out_features": 10}]}})",
               "model: layer 1 (linear) expects input [batch, features] or [batch, time, "
               "features], got [1, 26, 26, 4] from layer 0 (conv2d)");
  expect_error(R"({"model": "resnet"})", "unknown built-in model 'resnet'");
  expect_error(R"({"model": 3})", "'model' must be a built-in model name");
}

TEST(Config, JsonRoundTrip) {
  TrainConfig c;
  c.model = "cnn-bn";
  c.batch = 32;
  c.optimizer.name = "lamb";
  c.schedule.name = "cosine";
  c.schedule.warmup_steps = 5;
  const TrainConfig back = config_from_json(to_json(c));
  EXPECT_EQ(to_json(back), to_json(c));
}

// The parameters after three steps of the optimizer that `step_options(c)` hands the
// strategy (three: a momentum buffer changes nothing on the first).
std::vector<float> after_three_steps(const TrainConfig& c) {
  const std::vector<optim::Segment> segments = {{"w", 0, 4, true}};
  auto opt = optim::make_optimizer(step_options(c).optimizer, segments, 4);
  std::vector<float> p = {0.5f, -1.0f, 2.0f, 0.25f};
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> g = {0.1f * float(t + 1), -0.3f, 0.2f, -0.05f * float(t)};
    opt->step(p.data(), g.data(), 0.1f);
  }
  return p;
}

TEST(Config, OneOptimizerStructOneMomentumDefault) {
  // The config's optimizer is the struct make_optimizer takes, with one momentum default:
  // 0.9, the value a bare `--optimizer.name sgd` run has always had.
  static_assert(std::is_same_v<decltype(TrainConfig::optimizer), optim::OptimizerConfig>);
  EXPECT_EQ(optim::OptimizerConfig{}.momentum, 0.9);
  EXPECT_EQ(TrainConfig{}.optimizer.momentum, optim::OptimizerConfig{}.momentum);
  EXPECT_EQ(to_json(TrainConfig{})["optimizer"]["momentum"], 0.9);

  // The default config's SGD steps with momentum 0.9, not as plain SGD.
  TrainConfig sgd;
  std::vector<float> expected = {0.5f, -1.0f, 2.0f, 0.25f};
  optim::Sgd reference({{"w", 0, 4, true}}, 4, {.momentum = 0.9f});
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> g = {0.1f * float(t + 1), -0.3f, 0.2f, -0.05f * float(t)};
    reference.step(expected.data(), g.data(), 0.1f);
  }
  EXPECT_EQ(after_three_steps(sgd), expected);
  TrainConfig plain = sgd;
  plain.optimizer.momentum = 0;
  EXPECT_NE(after_three_steps(plain), expected);

  // Adaptive optimizers ignore momentum: their betas are their momentum.
  for (const char* name : {"adam", "adamw", "adagrad", "lamb"}) {
    TrainConfig adaptive;  // momentum at its default, 0.9
    adaptive.optimizer.name = name;
    TrainConfig without = adaptive;
    without.optimizer.momentum = 0;
    EXPECT_EQ(after_three_steps(adaptive), after_three_steps(without)) << name;
  }
}

// Flattens {"optimizer": {"lr": 1}} into {"optimizer.lr": 1}.
std::map<std::string, json> flat(const json& j, const std::string& prefix = "") {
  std::map<std::string, json> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_object() && it.key() != "model") {
      for (auto& [k, v] : flat(*it, prefix + it.key() + ".")) out[k] = v;
    } else {
      out[prefix + it.key()] = *it;
    }
  }
  return out;
}

TEST(Settings, EveryFieldHasOneKeyAndEveryFlagOneKey) {
  std::set<std::string> keys;
  for (const Setting& s : settings()) EXPECT_TRUE(keys.insert(s.key).second) << s.key;
  std::set<std::string> written;
  for (const auto& [k, v] : flat(to_json(TrainConfig{}))) written.insert(k);
  EXPECT_EQ(written, keys);
  // Every spelling of every flag belongs to one key; the first is the key's own name.
  std::map<std::string, std::string> owner;
  for (const Setting& s : settings()) {
    const auto names = flag_names(s);
    std::string canonical = "--" + s.key;
    for (char& ch : canonical)
      if (ch == '_') ch = '-';
    EXPECT_EQ(names.front(), canonical);
    for (const std::string& n : names) {
      const auto [it, fresh] = owner.emplace(n, s.key);
      EXPECT_TRUE(fresh) << n << " names both " << it->second << " and " << s.key;
    }
  }
  // Today's spellings that scripts use.
  for (const char* f : {"--steps", "--lr", "--optimizer", "--schedule", "--warmup", "--clip",
                        "--flip", "--crop-pad", "--erase", "--weight-decay", "--momentum",
                        "--batch", "--max-steps", "--optimizer.lr", "--schedule.warmup-steps"})
    EXPECT_TRUE(owner.count(f)) << f;
  EXPECT_EQ(owner["--lr"], "optimizer.lr");
  EXPECT_EQ(owner["--optimizer"], "optimizer.name");
  EXPECT_FALSE(owner.count("--name"));  // optimizer.name and schedule.name: ambiguous
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A config loaded in C++ names its data as the CLI does: relative to the file's folder.
TEST(Config, ConfigFileDataPathsResolveAgainstItsFolder) {
  const testing::TempDir tmp;
  const std::string path = tmp.path() + "/c.json";
  std::ofstream(path) << R"({"model": "mlp", "dataset": "npy", "data_dir": "fm",
    "npy": ["x.npy", "sub/y.npy", "/abs/tx.npy", "../ty.npy"], "text_files": ["t.txt"]})";
  const TrainConfig c = load_config_file(path);
  const std::string dir = std::filesystem::path(tmp.path()).lexically_normal().string();
  EXPECT_EQ(c.data_dir, dir + "/fm");
  EXPECT_EQ(c.npy, (std::vector<std::string>{
                       dir + "/x.npy", dir + "/sub/y.npy", "/abs/tx.npy",
                       std::filesystem::path(dir).parent_path().string() + "/ty.npy"}));
  EXPECT_EQ(c.text_files, std::vector<std::string>{dir + "/t.txt"});
}

// The simplest line, --model cnn, trains with the recipe configs/cnn.json was measured
// with: the file adds only the run's length and where it writes.
TEST(Recipes, BuiltinModelBringsItsRecipe) {
  for (const std::string& model : builtin_model_names()) {
    const std::string path = std::string(BRAID_SOURCE_DIR) + "/configs/" + model + ".json";
    const json file = read_json(path);
    json from_file = to_json(load_config_file(path));
    json from_name = to_json(config_from_json({{"model", model}}));
    for (const char* run_key : {"epochs", "max_steps", "log_every", "eval_every", "out"}) {
      from_file.erase(run_key);
      from_name.erase(run_key);
    }
    EXPECT_EQ(from_file, from_name) << model;
    // One source of truth: the file repeats none of the recipe's values.
    const auto recipe = flat(*builtin_recipe(model));
    for (const auto& [key, value] : flat(file))
      EXPECT_FALSE(recipe.count(key))
          << path << " repeats '" << key << "' of the built-in recipe (recipes.cpp)";
  }
  const TrainConfig cnn = config_from_json(json::object());  // no model named: cnn
  EXPECT_EQ(cnn.model, "cnn");
  EXPECT_EQ(cnn.optimizer.name, "adam");
  EXPECT_DOUBLE_EQ(cnn.optimizer.lr, 3e-3);
  EXPECT_DOUBLE_EQ(cnn.optimizer.weight_decay, 0);
  EXPECT_EQ(cnn.schedule.name, "cosine");
  EXPECT_EQ(cnn.schedule.warmup_steps, 0);
  const TrainConfig gpt = config_from_json({{"model", "gpt-tiny"}});
  EXPECT_EQ(gpt.dataset, "text");
  EXPECT_EQ(gpt.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(gpt.optimizer.beta2, 0.95);
}

TEST(Recipes, ExplicitKeysWin) {
  const TrainConfig c = config_from_json(json::parse(
      R"({"model": "cnn-bn", "batch": 32, "augment_flip": false, "optimizer": {"lr": 0.1}})"));
  EXPECT_EQ(c.batch, 32);
  EXPECT_FALSE(c.augment_flip);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 1e-4);  // the rest of the recipe stays
  EXPECT_DOUBLE_EQ(c.label_smoothing, 0.1);
  // A model spec of one's own brings no recipe: the plain defaults.
  const TrainConfig own = config_from_json(json::parse(
      R"({"model": {"input": [4], "layers": [{"type": "linear", "out_features": 2}]}})"));
  EXPECT_DOUBLE_EQ(own.optimizer.lr, TrainConfig{}.optimizer.lr);
  EXPECT_EQ(own.schedule.name, "constant");
  // A resolved config round-trips whatever the recipe: every key is explicit.
  TrainConfig plain;
  plain.model = "cnn";
  EXPECT_EQ(to_json(config_from_json(to_json(plain))), to_json(plain));
}

}  // namespace
}  // namespace braid::train
