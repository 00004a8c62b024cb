// Each built-in model's best measured training recipe: the settings a run of that model
// starts from, under whatever the config file and the flags set. They are the one source
// of these numbers; configs/<model>.json repeats none of them (a test checks), and the
// resolved config (OUT/config.json) shows every value a run used. Measured on
// Fashion-MNIST (bench/README.md); gpt-tiny's is nanoGPT's small-model AdamW.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace braid::train {

// The names of the built-in models: mlp, cnn, cnn-bn, gpt-tiny.
const std::vector<std::string>& builtin_model_names();
// The recipe of a built-in model as a partial config ({"batch": 128, "optimizer": {...}}),
// or null for any other name.
const nlohmann::json* builtin_recipe(const std::string& model);

}  // namespace braid::train
