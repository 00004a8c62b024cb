// The flags of `braid train` that set a TrainConfig key. Registering them and laying the
// given ones over a config's JSON is one step, so every flag and its key share a name and
// one validation path (train/config.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>

namespace braid::cli {

// Adds every setting flag to `cmd`. The returned function, called after parsing, writes
// each flag the user gave into `j` under its config key (flags win over the file).
std::function<void(nlohmann::json& j)> add_setting_flags(CLI::App* cmd);

}  // namespace braid::cli
