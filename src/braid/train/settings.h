// The one table of training settings. Each TrainConfig field is one row: its config key
// ("optimizer.lr"), its kind, its bounds or accepted values, its help and how to read and
// write the field. config.cpp reads, validates and writes JSON from this table and
// cli/train_settings.cpp derives the flags of `braid train` from it, so a key and its flag
// cannot drift apart and nothing else lists the settings.
//
// The flag rule (flag_names): the key with '_' written '-', dots kept: `max_steps` is
// `--max-steps`, `optimizer.lr` is `--optimizer.lr`. A nested key also answers to its last
// part where no other key ends that way (`--lr`, `--warmup-steps`), `X.name` to `--X`
// (`--optimizer adamw`), and a boolean key to `--no-...` for false. A few spellings of
// earlier versions (`--steps`, `--clip`, `--warmup`, ...) stay as aliases.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "train/config.h"

namespace braid::train {

enum class SettingKind { boolean, integer, number, text, text_list, number_list, model };

// Bounds of a number; an open end excludes its value.
struct Range {
  double lo, hi;
  bool lo_open = false, hi_open = false;
};

struct Setting {
  std::string key;  // "optimizer.lr"
  SettingKind kind = SettingKind::text;
  std::string group;  // the help section: "Model and data", "Optimizer", ...
  std::string help;
  int64_t int_lo = 0, int_hi = 0;    // integer: inclusive bounds
  Range range{0, 0};                 // number, and each of a number_list
  std::vector<std::string> choices;  // text: the accepted values (empty: any)
  std::vector<std::string> old_flags;
  // May differ between the ranks of one job (paths, thread counts, a benchmark's per-rank
  // delay); every other key must agree (train/config_agreement.h).
  bool per_rank = false;
  std::function<nlohmann::json(const TrainConfig&)> get;
  // Stores a value that check_value() returned.
  std::function<void(TrainConfig&, const nlohmann::json&)> set;
};

// The largest values a few keys take: enough for any run, small enough that no product
// of them overflows or allocates past reason before the trainer checks memory.
inline constexpr int64_t kMaxBatch = (int64_t{1} << 31) - 1;
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;
inline constexpr int64_t kMaxEpochs = 1'000'000;

const std::vector<Setting>& settings();
// The row of `key` ("optimizer.lr"), or null.
const Setting* find_setting(std::string_view key);
// True if `key` names a group of keys ("optimizer", "schedule").
bool is_section(std::string_view key);

// Every spelling of the setting's flag, the canonical one first ("--optimizer.lr", "--lr").
std::vector<std::string> flag_names(const Setting& s);
// A boolean's flag for false ("--no-augment-flip"); empty for other kinds.
std::string negated_flag(const Setting& s);

// `v` as the setting stores it (an integral 1e3 becomes the integer 1000), or a
// braid::Error naming the key, what it accepts and what it got.
nlohmann::json check_value(const Setting& s, const nlohmann::json& v);
// What the setting accepts, for errors and help: "positive and at most 1024 (an integer)",
// "in [0, 1) (a number)", "one of: sgd, adam, ...". Without the type in brackets for help.
std::string describe_accepted(const Setting& s, bool with_type = true);

// The key a misspelt key most likely meant ("max_step", "lr", "steps" -> "max_steps",
// "optimizer.lr", "max_steps"), or empty when none is close.
std::string suggest_key(std::string_view unknown);

}  // namespace braid::train
