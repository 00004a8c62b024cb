// DeepSpeed configs mapped onto braid's keys (train/deepspeed_config.h): DeepSpeed's own
// documentation example, the batch arithmetic, loss scaling, the optimizers, and the keys
// refused by name.
#include "train/deepspeed_config.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "train/config.h"
#include "train/settings.h"

namespace braid::train {
namespace {

using nlohmann::json;

DeepSpeedMapping map(const json& ds, int64_t world = 1) {
  return map_deepspeed_config(ds, world, "ds.json");
}

// The error map() throws, or "" when it maps.
std::string error_of(const json& ds, int64_t world = 1) {
  try {
    map(ds, world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The example of https://www.deepspeed.ai/docs/config-json/ ("batch size related
// parameters" and the opening example).
TEST(DeepSpeedConfig, DocumentationExampleMaps) {
  const json ds = json::parse(R"({
    "train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 0.00015}},
    "fp16": {"enabled": true},
    "zero_optimization": true
  })");
  const json want = json::parse(R"({
    "batch": 8, "accumulate_steps": 1, "global_batch": 0,
    "optimizer": {"name": "adamw", "lr": 0.00015, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                  "weight_decay": 0.0},
    "precision": "fp16",
    "zero_stage": 1
  })");
  const DeepSpeedMapping m = map(ds);
  EXPECT_EQ(m.config, want) << m.config.dump();
  EXPECT_TRUE(m.notes.empty());
  // Over 2 ranks, each takes 4.
  EXPECT_EQ(map(ds, 2).config["batch"], 4);
  // braid's own config reader takes what it maps.
  const TrainConfig c = config_from_json(m.config);
  EXPECT_EQ(c.optimizer.name, "adamw");
  EXPECT_EQ(c.precision, "fp16");
}

TEST(DeepSpeedConfig, TwoOfTheBatchSizesDeriveTheThird) {
  // micro x gas: train = micro x gas x world; braid's batch = micro x gas.
  json m =
      map({{"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 3}}, 2).config;
  EXPECT_EQ(m["batch"], 12);
  EXPECT_EQ(m["accumulate_steps"], 3);
  // train and micro: gas = 48 / (4 x 2) = 6.
  m = map({{"train_batch_size", 48}, {"train_micro_batch_size_per_gpu", 4}}, 2).config;
  EXPECT_EQ(m["batch"], 24);
  EXPECT_EQ(m["accumulate_steps"], 6);
  // train and gas: micro = 48 / (3 x 2) = 8.
  m = map({{"train_batch_size", 48}, {"gradient_accumulation_steps", 3}}, 2).config;
  EXPECT_EQ(m["batch"], 24);
  EXPECT_EQ(m["accumulate_steps"], 3);
  // One alone: gas 1.
  m = map({{"train_batch_size", 48}}, 3).config;
  EXPECT_EQ(m["batch"], 16);
  EXPECT_EQ(m["accumulate_steps"], 1);
  m = map({{"train_micro_batch_size_per_gpu", 5}}, 3).config;
  EXPECT_EQ(m["batch"], 5);
  EXPECT_EQ(m["accumulate_steps"], 1);
}

TEST(DeepSpeedConfig, AllThreeBatchSizesMustAgree) {
  const json ok = {{"train_batch_size", 32},
                   {"train_micro_batch_size_per_gpu", 4},
                   {"gradient_accumulation_steps", 2}};
  EXPECT_EQ(map(ok, 4).config["batch"], 8);
  EXPECT_EQ(map(ok, 4).config["accumulate_steps"], 2);
  const std::string e = error_of(ok, 2);
  EXPECT_TRUE(contains(e, "ds.json")) << e;
  EXPECT_TRUE(contains(e, "train_batch_size 32")) << e;
  EXPECT_TRUE(contains(e, "train_micro_batch_size_per_gpu 4")) << e;
  EXPECT_TRUE(contains(e, "gradient_accumulation_steps 2")) << e;
  EXPECT_TRUE(contains(e, "2 ranks")) << e;
  EXPECT_TRUE(contains(error_of({{"train_batch_size", 30}, {"train_micro_batch_size_per_gpu", 4}}),
                       "not a multiple"));
  EXPECT_TRUE(contains(error_of({{"gradient_accumulation_steps", 2}}), "alone"));
  EXPECT_TRUE(contains(error_of({{"train_batch_size", "auto"}}), "Hugging"));
}

TEST(DeepSpeedConfig, DynamicLossScale) {
  const json m = map(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 0,
      "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 3,
      "min_loss_scale": 1}})"))
                     .config;
  EXPECT_EQ(m["precision"], "fp16");
  EXPECT_EQ(m["fp16"], json::parse(
                           R"({"initial_scale_power": 12, "loss_scale_window": 500,
                               "hysteresis": 3})"));
  EXPECT_TRUE(contains(error_of(json::parse(R"({"fp16": {"min_loss_scale": 0.5}})")),
                       "fp16.min_loss_scale"));
}

TEST(DeepSpeedConfig, StaticLossScaleNeverMoves) {
  const DeepSpeedMapping m = map(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 1024}})"));
  EXPECT_EQ(m.config["fp16"]["initial_scale_power"], 10);
  EXPECT_EQ(m.config["fp16"]["loss_scale_window"], kMaxSteps);  // past any run
  EXPECT_EQ(m.config["fp16"]["hysteresis"], int64_t{1} << 20);
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_TRUE(contains(m.notes[0], "static")) << m.notes[0];
  const std::string e = error_of(json::parse(R"({"fp16": {"loss_scale": 1000}})"));
  EXPECT_TRUE(contains(e, "fp16.loss_scale")) << e;
  EXPECT_TRUE(contains(e, "power of two")) << e;
}

TEST(DeepSpeedConfig, PrecisionAndZeroAndClipping) {
  json m = map(json::parse(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
      "overlap_comm": true}, "gradient_clipping": 1.0, "communication_data_type": "bf16"})"))
               .config;
  EXPECT_EQ(m["precision"], "bf16");
  EXPECT_EQ(m["zero_stage"], 2);
  EXPECT_EQ(m["clip_grad_norm"], 1.0);
  EXPECT_EQ(m["comm_dtype"], "bf16");
  EXPECT_TRUE(contains(error_of(json::parse(R"({"bf16": {"enabled": true},
      "fp16": {"enabled": true}})")),
                       "both"));
  // Disabled fp16 sets nothing.
  EXPECT_FALSE(map(json::parse(R"({"fp16": {"enabled": false}})")).config.contains("precision"));
}

TEST(DeepSpeedConfig, Optimizers) {
  json o = map(json::parse(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.001,
      "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.01, "adam_w_mode": false}}})"))
               .config["optimizer"];
  EXPECT_EQ(o, json::parse(R"({"name": "adam", "lr": 0.001, "beta1": 0.8, "beta2": 0.99,
      "eps": 1e-6, "weight_decay": 0.01})"));
  o = map(json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.002}}})"))
          .config["optimizer"];
  EXPECT_EQ(o["name"], "adamw");
  o = map(json::parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1,
      "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4}}})"))
          .config["optimizer"];
  EXPECT_EQ(o, json::parse(R"({"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true,
      "weight_decay": 5e-4})"));
  o = map(json::parse(R"({"optimizer": {"type": "Adagrad", "params": {"lr": 0.05}}})"))
          .config["optimizer"];
  EXPECT_EQ(o["eps"], 1e-10);
  EXPECT_TRUE(contains(error_of(json::parse(R"({"optimizer": {"type": "SGD"}})")), "lr"));
  std::string e = error_of(json::parse(R"({"optimizer": {"type": "Lion"}})"));
  EXPECT_TRUE(contains(e, "\"Lion\"")) << e;
  e = error_of(json::parse(R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})"));
  EXPECT_TRUE(contains(e, "optimizer.params.amsgrad")) << e;
}

TEST(DeepSpeedConfig, LambIsFusedLambWithItsDefaults) {
  // DeepSpeed's docs example (config-json, "optimizer"): Lamb with bias_correction false.
  json o = map(json::parse(R"({"optimizer": {"type": "Lamb", "params": {"lr": 1e-3,
      "weight_decay": 0.01, "bias_correction": false, "max_coeff": 0.3, "min_coeff": 0.01}}})"))
               .config["optimizer"];
  EXPECT_EQ(o, json::parse(R"({"name": "lamb", "lamb_form": "deepspeed", "lr": 0.001,
      "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "min_trust": 0.01,
      "max_trust": 0.3, "bias_correction": false})"));
  // What the block leaves out takes FusedLamb's defaults.
  o = map(json::parse(R"({"optimizer": {"type": "Lamb"}})")).config["optimizer"];
  EXPECT_EQ(o["min_trust"], 0.01);
  EXPECT_EQ(o["max_trust"], 10.0);
  EXPECT_EQ(o["bias_correction"], true);
  EXPECT_EQ(o["eps"], 1e-8);
  EXPECT_EQ(o["lr"], 1e-3);
  std::string e = error_of(
      json::parse(R"({"optimizer": {"type": "Lamb", "params": {"eps_inside_sqrt": true}}})"));
  EXPECT_TRUE(contains(e, "eps_inside_sqrt")) << e;
  e = error_of(json::parse(R"({"optimizer": {"type": "Lamb", "params": {"max_grad_norm": 1}}})"));
  EXPECT_TRUE(contains(e, "gradient_clipping")) << e;
  e = error_of(json::parse(
      R"({"optimizer": {"type": "Lamb", "params": {"min_coeff": 2, "max_coeff": 1}}})"));
  EXPECT_TRUE(contains(e, "max_coeff")) << e;
}

TEST(DeepSpeedConfig, WarmupSchedulersMapOntoBraidsSchedule) {
  DeepSpeedMapping m = map(json::parse(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.5}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.01, "warmup_max_lr": 0.1,
      "warmup_num_steps": 10, "warmup_type": "linear"}}})"));
  json s = m.config["schedule"];
  EXPECT_EQ(s["name"], "constant");
  EXPECT_EQ(s["warmup_steps"], 10);
  EXPECT_EQ(s["warmup_type"], "linear");
  EXPECT_DOUBLE_EQ(s["warmup_start_ratio"].get<double>(), 0.1);
  EXPECT_EQ(s["lag_steps"], 1);
  EXPECT_EQ(m.config["optimizer"]["lr"], 0.1);  // warmup_max_lr replaces the optimizer's lr
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_TRUE(contains(m.notes[0], "warmup_max_lr")) << m.notes[0];

  // DeepSpeed's defaults: log, 1000 steps, from 0 to 0.001.
  s = map({{"scheduler", {{"type", "WarmupLR"}}}}).config["schedule"];
  EXPECT_EQ(s["warmup_type"], "log");
  EXPECT_EQ(s["warmup_steps"], 1000);
  EXPECT_EQ(s["warmup_start_ratio"], 0.0);
  // warmup_num_steps below 2 is 2 in DeepSpeed.
  m = map(json::parse(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}})"));
  EXPECT_EQ(m.config["schedule"]["warmup_steps"], 2);
  EXPECT_EQ(m.notes.size(), 1u);

  s = map(json::parse(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps":
      30, "warmup_min_lr": 0.01, "warmup_max_lr": 0.1, "warmup_num_steps": 10}}})"))
          .config["schedule"];
  EXPECT_EQ(s["name"], "linear");
  EXPECT_EQ(s["total_steps"], 30);
  EXPECT_EQ(s["min_lr"], 0.01);
  EXPECT_EQ(s["warmup_type"], "log");

  m = map(json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.3}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 30,
      "warmup_num_steps": 10, "cos_min_ratio": 0.1}}})"));
  s = m.config["schedule"];
  EXPECT_EQ(s["name"], "warmup_cosine");
  EXPECT_EQ(s["total_steps"], 30);
  EXPECT_EQ(s["min_ratio"], 0.1);
  EXPECT_EQ(s["warmup_start_ratio"], 0.0);
  EXPECT_EQ(m.config["optimizer"]["lr"], 0.3);  // ratios of the optimizer's lr
  // The mapped config is a valid braid config.
  TrainConfig c = config_from_json(m.config);
  EXPECT_EQ(c.schedule.name, "warmup_cosine");
  EXPECT_EQ(c.schedule.lag_steps, 1);
  EXPECT_DOUBLE_EQ(c.schedule.min_ratio, 0.1);
}

TEST(DeepSpeedConfig, SchedulersBraidCannotMatchAreRefusedByName) {
  for (const char* type : {"OneCycle", "LRRangeTest"}) {
    const std::string e = error_of({{"scheduler", {{"type", type}, {"params", json::object()}}}});
    EXPECT_TRUE(contains(e, "scheduler.type")) << e;
    EXPECT_TRUE(contains(e, type)) << e;
    EXPECT_TRUE(contains(e, "schedule.warmup_steps")) << e;
  }
  std::string e = error_of(json::parse(
      R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}})"));
  EXPECT_TRUE(contains(e, "scheduler.params.total_num_steps")) << e;
  e = error_of(json::parse(R"({"scheduler": {"type": "WarmupCosineLR", "params":
      {"total_num_steps": 10, "warmup_num_steps": 10}}})"));
  EXPECT_TRUE(contains(e, "scheduler.params.total_num_steps")) << e;
  e = error_of(json::parse(R"({"scheduler": {"type": "WarmupCosineLR", "params":
      {"total_num_steps": 2000, "warmup_min_ratio": 0.1}}})"));
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_min_ratio")) << e;
  e = error_of(
      json::parse(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "exp"}}})"));
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_type")) << e;
  e = error_of(
      json::parse(R"({"scheduler": {"type": "WarmupLR", "params": {"cycle_min_lr": 0.1}}})"));
  EXPECT_TRUE(contains(e, "scheduler.params.cycle_min_lr")) << e;
}

TEST(DeepSpeedConfig, UnknownAndUnsupportedKeysAreNamed) {
  std::string e = error_of({{"train_batch_size", 8}, {"amp", {{"enabled", true}}}});
  EXPECT_TRUE(contains(e, "ds.json: 'amp'")) << e;
  e = error_of(json::parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer":
      {"device": "cpu"}}})"));
  EXPECT_TRUE(contains(e, "'zero_optimization.offload_optimizer'")) << e;
  e = error_of(json::parse(R"({"fp16": {"enabled": true, "auto_cast": true}})"));
  EXPECT_TRUE(contains(e, "fp16.auto_cast")) << e;
  e = error_of({{"prescale_gradients", true}});
  EXPECT_TRUE(contains(e, "prescale_gradients")) << e;
  // Keys that change nothing: accepted, each with one note.
  const DeepSpeedMapping m = map({{"steps_per_print", 10}, {"wall_clock_breakdown", false}});
  EXPECT_TRUE(m.config.empty());
  ASSERT_EQ(m.notes.size(), 2u);
  EXPECT_TRUE(contains(m.notes[0] + m.notes[1], "steps_per_print"));
  EXPECT_TRUE(contains(m.notes[0] + m.notes[1], "wall_clock_breakdown"));
}

}  // namespace
}  // namespace braid::train
