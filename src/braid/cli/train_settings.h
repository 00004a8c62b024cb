// The flags of `braid train` that set a TrainConfig key, derived from the settings table
// (train/settings.h): one flag per key, named by the key, with the key's help, bounds and
// default. Given flags are laid over a config's JSON, so a flag's value goes through the
// same validation as the key's and its errors name the key.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>

namespace braid::cli {

// Adds every setting flag to `cmd` and lets it collect unknown arguments. The returned
// function, called after parsing, refuses an unknown flag (naming the closest one) and
// writes each flag the user gave into `j` under its config key (flags win over the file).
std::function<void(nlohmann::json& j)> add_setting_flags(CLI::App* cmd);

}  // namespace braid::cli
