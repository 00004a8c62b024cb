#include "train/config.h"

#include <gtest/gtest.h>

#include "core/error.h"

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
  const std::string nested = error_of(json::parse(R"({"optimizer": {"learning_rate": 3}})"));
  EXPECT_NE(nested.find("'optimizer.learning_rate'"), std::string::npos) << nested;
}

TEST(Config, WrongTypeAndBadValuesNameTheKey) {
  EXPECT_NE(error_of(json::parse(R"({"batch": "big"})")).find("'batch' has the wrong type"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"batch": 0})")).find("'batch' must be positive"),
            std::string::npos);
  const std::string e = error_of(json::parse(R"({"optimizer": {"name": "adamax"}})"));
  EXPECT_NE(e.find("'optimizer.name' is 'adamax'; accepted: sgd"), std::string::npos) << e;
  EXPECT_NE(error_of(json::parse(R"({"dataset": "npy"})")).find("'npy' needs 4 paths"),
            std::string::npos);
  for (const char* decay : {R"({"ema_decay": 1.0})", R"({"ema_decay": -0.1})"})
    EXPECT_NE(error_of(json::parse(decay)).find("'ema_decay' must be in [0, 1)"), std::string::npos)
        << decay;
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

}  // namespace
}  // namespace braid::train
