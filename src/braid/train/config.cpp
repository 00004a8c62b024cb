#include "train/config.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "train/model_spec.h"
#include "train/recipes.h"
#include "train/settings.h"

namespace braid::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string join_keys_under(const std::string& section) {
  std::string list;
  for (const Setting& s : settings()) {
    if (!section.empty() && !s.key.starts_with(section + ".")) continue;
    std::string name = section.empty() ? s.key : s.key.substr(section.size() + 1);
    list += (list.empty() ? "" : ", ") + name;
  }
  return list;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& section) {
  const std::string near = suggest_key(key);
  if (!near.empty())
    BRAID_THROW(Error, "config: unknown key '", key, "'; did you mean '", near, "'?");
  BRAID_THROW(Error, "config: unknown key '", key, "'; accepted",
              section.empty() ? "" : " in '" + section + "'", ": ", join_keys_under(section));
}

// Reads every member of the object `j` (the section `section`, "" for the top level)
// into `c`: a known key through its row of the settings table, a section by recursion.
void read_object(const json& j, const std::string& section, TrainConfig& c) {
  BRAID_CHECK(j.is_object(), "config: ", section.empty() ? "the top level" : "'" + section + "'",
              " must be a JSON object ({\"key\": value, ...}), got ", j.type_name(), " ",
              j.dump().substr(0, 40));
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = section.empty() ? it.key() : section + "." + it.key();
    if (const Setting* s = find_setting(key))
      s->set(c, check_value(*s, it.value()));
    else if (is_section(key))
      read_object(it.value(), key, c);
    else
      unknown_key(key, section);
  }
}

}  // namespace

TrainConfig config_from_json(const json& j, const TrainConfig& base) {
  TrainConfig c = base;
  read_object(j, "", c);
  validate(c);
  return c;
}

TrainConfig config_from_json(const json& j) {
  TrainConfig c;
  read_object(j, "", c);  // first for its errors, and to learn the model
  if (c.model.is_string())
    if (const json* recipe = builtin_recipe(c.model.get<std::string>())) {
      c = TrainConfig{};
      read_object(*recipe, "", c);
      read_object(j, "", c);
    }
  validate(c);
  return c;
}

json read_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) BRAID_THROW(IoError, "config '", path, "': cannot open it (does the file exist?)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    // Besides syntax errors, a number past double's range (1e400) lands here.
    BRAID_THROW(Error, "config '", path, "': not valid JSON: ", e.what());
  }
  if (!j.is_object()) return j;  // config_from_json names the problem
  const fs::path base = fs::absolute(fs::path(path)).parent_path();
  auto resolve_path = [&](json& v) {
    if (v.is_string() && !v.get<std::string>().empty() &&
        fs::path(v.get<std::string>()).is_relative())
      v = (base / v.get<std::string>()).lexically_normal().string();
  };
  for (const char* key : {"npy", "npy_shards", "npy_shard_labels", "text_files"})
    if (auto it = j.find(key); it != j.end() && it->is_array())
      for (json& v : *it) resolve_path(v);
  for (const char* key : {"data_dir", "image_train", "image_test", "csv_train", "csv_test"})
    if (auto it = j.find(key); it != j.end()) resolve_path(*it);
  return j;
}

TrainConfig load_config_file(const std::string& path) {
  const json j = read_config_file(path);
  try {
    return config_from_json(j);
  } catch (const Error& e) {
    BRAID_THROW(Error, path, ": ", e.what());
  }
}

void validate(const TrainConfig& c) {
  // A struct built in C++ passes the same checks as a config file.
  for (const Setting& s : settings()) check_value(s, s.get(c));
  if (c.dataset == "npy" && c.npy_shards.empty())
    BRAID_CHECK(c.npy.size() == 4,
                "config: 'npy' needs 4 paths: train features, train labels, test features, "
                "test labels; got ",
                c.npy.size());
  if (c.dataset == "npy" && !c.npy_shards.empty()) {
    BRAID_CHECK(c.npy.size() == 2, "config: with 'npy_shards', 'npy' holds the test split only: ",
                "2 paths, test features and test labels; got ", c.npy.size());
    BRAID_CHECK(!c.npy_shard_labels.empty(), "config: 'npy_shards' needs 'npy_shard_labels', ",
                "the labels files paired with them in order");
    BRAID_CHECK(c.global_batch == 0, "config: 'npy_shards' assigns files to a fixed number of ",
                "ranks, which 'global_batch' (a step grid for any world size) cannot keep; ",
                "unset global_batch");
  }
  if (c.dataset == "image_folder") {
    BRAID_CHECK(!c.image_train.empty() && !c.image_test.empty(),
                "config: dataset 'image_folder' needs 'image_train' and 'image_test', each a "
                "folder with a subfolder of images per class");
    BRAID_CHECK(c.image_channels == 1 || c.image_channels == 3,
                "config: 'image_channels' is 1 (gray) or 3 (RGB), got ", c.image_channels);
  }
  if (c.dataset == "csv") {
    BRAID_CHECK(!c.csv_train.empty(), "config: dataset 'csv' needs 'csv_train', the table to ",
                "train on (and optionally 'csv_test')");
    BRAID_CHECK(c.csv_delimiter.size() <= 1 || c.csv_delimiter == "tab",
                "config: 'csv_delimiter' is '", c.csv_delimiter,
                "'; give one character (',', ';', '|') or 'tab'");
  }
  const bool ce = c.loss == "cross_entropy";
  BRAID_CHECK(ce || c.label_smoothing == 0, "config: label_smoothing ", c.label_smoothing,
              " smooths cross-entropy's class targets, but loss is ", c.loss,
              "; drop label_smoothing");
  BRAID_CHECK(ce || c.loss_class_weights.empty(),
              "config: loss_class_weights weigh "
              "cross-entropy's classes, but loss is ",
              c.loss, "; drop loss_class_weights");
  BRAID_CHECK(c.loss_class_weights.empty() || c.label_smoothing == 0,
              "config: loss_class_weights with label_smoothing is not built (PyTorch's weighted "
              "smoothing); drop one");
  BRAID_CHECK(ce || c.dataset == "npy" || c.dataset == "csv", "config: loss ", c.loss,
              " takes numeric targets, which datasets npy (float labels) and csv give, not '",
              c.dataset, "'; use loss cross_entropy");
  BRAID_CHECK(!ce || c.csv_targets.empty(),
              "config: csv_targets are numeric targets for a "
              "regression or bce_with_logits loss, but loss is cross_entropy; set loss (mse, l1, "
              "huber, bce_with_logits) or use csv_label for class labels");
  check_model_spec(c.model, c.seq_len);
}

nlohmann::json to_json(const TrainConfig& c) {
  json j = json::object();
  for (const Setting& s : settings()) {
    json* at = &j;
    std::string key = s.key;
    for (size_t dot; (dot = key.find('.')) != std::string::npos; key = key.substr(dot + 1))
      at = &(*at)[key.substr(0, dot)];
    (*at)[key] = s.get(c);
  }
  return j;
}

}  // namespace braid::train
