#include "train/config.h"

#include <fstream>
#include <set>

#include "core/error.h"

namespace braid::train {
namespace {

using nlohmann::json;

// Reads known keys of one JSON object into fields; any other key is an error that lists
// the accepted ones.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    BRAID_CHECK(j.is_object(), "config: '", path_.empty() ? "<top>" : path_,
                "' must be a JSON object, got ", j.type_name());
  }

  template <typename T>
  void read(const char* key, T& field) {
    accepted_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return;
    try {
      field = it->template get<T>();
    } catch (const json::exception&) {
      BRAID_THROW(Error, "config: '", name(key), "' has the wrong type (", it->type_name(),
                  "); expected ", expected<T>());
    }
  }
  void read_json(const char* key, json& field) {
    accepted_.insert(key);
    if (auto it = j_.find(key); it != j_.end()) field = *it;
  }
  const json* child(const char* key) {
    accepted_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  std::string name(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (accepted_.count(it.key())) continue;
      std::string list;
      for (const auto& k : accepted_) list += (list.empty() ? "" : ", ") + k;
      BRAID_THROW(Error, "config: unknown key '", name(it.key().c_str()), "'; accepted: ", list);
    }
  }

 private:
  template <typename T>
  static const char* expected() {
    if constexpr (std::is_same_v<T, bool>)
      return "true or false";
    else if constexpr (std::is_integral_v<T>)
      return "an integer";
    else if constexpr (std::is_floating_point_v<T>)
      return "a number";
    else if constexpr (std::is_same_v<T, std::string>)
      return "a string";
    else
      return "a list of strings";
  }
  const json& j_;
  std::string path_;
  std::set<std::string> accepted_;
};

void check_one_of(const std::string& key, const std::string& value,
                  std::initializer_list<const char*> accepted) {
  std::string list;
  for (const char* a : accepted) {
    if (value == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  BRAID_THROW(Error, "config: '", key, "' is '", value, "'; accepted: ", list);
}

}  // namespace

TrainConfig config_from_json(const json& j, TrainConfig c) {
  ObjectReader r(j, "");
  r.read_json("model", c.model);
  r.read("dataset", c.dataset);
  r.read("data_dir", c.data_dir);
  r.read("npy", c.npy);
  r.read("text_files", c.text_files);
  r.read("seq_len", c.seq_len);
  r.read("epochs", c.epochs);
  r.read("max_steps", c.max_steps);
  r.read("batch", c.batch);
  r.read("seed", c.seed);
  r.read("threads", c.threads);
  r.read("clip_grad_norm", c.clip_grad_norm);
  r.read("augment_flip", c.augment_flip);
  r.read("augment_crop_pad", c.augment_crop_pad);
  r.read("augment_erase", c.augment_erase);
  r.read("label_smoothing", c.label_smoothing);
  r.read("ema_decay", c.ema_decay);
  r.read("out", c.out);
  r.read("log_every", c.log_every);
  r.read("eval_every", c.eval_every);
  r.read("eval_batches", c.eval_batches);
  r.read("checkpoint_every", c.checkpoint_every);
  if (const json* o = r.child("optimizer")) {
    ObjectReader ro(*o, "optimizer");
    auto& s = c.optimizer;
    ro.read("name", s.name);
    ro.read("lr", s.lr);
    ro.read("momentum", s.momentum);
    ro.read("nesterov", s.nesterov);
    ro.read("weight_decay", s.weight_decay);
    ro.read("beta1", s.beta1);
    ro.read("beta2", s.beta2);
    ro.read("eps", s.eps);
    ro.read("alpha", s.alpha);
    ro.read("trust_coefficient", s.trust_coefficient);
    ro.read("base_batch", s.base_batch);
    ro.finish();
  }
  if (const json* o = r.child("schedule")) {
    ObjectReader rs(*o, "schedule");
    auto& s = c.schedule;
    rs.read("name", s.name);
    rs.read("warmup_steps", s.warmup_steps);
    rs.read("step_size", s.step_size);
    rs.read("gamma", s.gamma);
    rs.read("min_lr", s.min_lr);
    rs.finish();
  }
  r.finish();
  validate(c);
  return c;
}

TrainConfig load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) BRAID_THROW(IoError, "config '", path, "': cannot open it (does the file exist?)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    BRAID_THROW(Error, "config '", path, "': not valid JSON: ", e.what());
  }
  try {
    return config_from_json(j);
  } catch (const Error& e) {
    BRAID_THROW(Error, path, ": ", e.what());
  }
}

void validate(const TrainConfig& c) {
  auto positive = [](const char* key, double v) {
    BRAID_CHECK(v > 0, "config: '", key, "' must be positive, got ", v);
  };
  auto non_negative = [](const char* key, double v) {
    BRAID_CHECK(v >= 0, "config: '", key, "' must be >= 0, got ", v);
  };
  check_one_of("dataset", c.dataset, {"fashion-mnist", "npy", "text"});
  if (c.dataset == "npy")
    BRAID_CHECK(c.npy.size() == 4,
                "config: 'npy' needs 4 paths: train features, train labels, test features, "
                "test labels; got ",
                c.npy.size());
  positive("epochs", static_cast<double>(c.epochs));
  positive("batch", static_cast<double>(c.batch));
  positive("seq_len", static_cast<double>(c.seq_len));
  positive("threads", c.threads);
  positive("log_every", static_cast<double>(c.log_every));
  non_negative("max_steps", static_cast<double>(c.max_steps));
  non_negative("eval_every", static_cast<double>(c.eval_every));
  non_negative("eval_batches", static_cast<double>(c.eval_batches));
  non_negative("checkpoint_every", static_cast<double>(c.checkpoint_every));
  non_negative("clip_grad_norm", c.clip_grad_norm);
  non_negative("augment_crop_pad", static_cast<double>(c.augment_crop_pad));
  BRAID_CHECK(c.augment_erase >= 0 && c.augment_erase <= 1,
              "config: 'augment_erase' is a probability and must be in [0, 1], got ",
              c.augment_erase);
  BRAID_CHECK(c.label_smoothing >= 0 && c.label_smoothing < 1,
              "config: 'label_smoothing' must be in [0, 1), got ", c.label_smoothing);
  BRAID_CHECK(c.ema_decay >= 0 && c.ema_decay < 1,
              "config: 'ema_decay' must be in [0, 1) (0: no weight average; 0.999 is typical), "
              "got ",
              c.ema_decay);
  check_one_of("optimizer.name", c.optimizer.name,
               {"sgd", "adam", "adamw", "rmsprop", "adagrad", "lars", "lamb"});
  positive("optimizer.lr", c.optimizer.lr);
  non_negative("optimizer.momentum", c.optimizer.momentum);
  non_negative("optimizer.weight_decay", c.optimizer.weight_decay);
  BRAID_CHECK(c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1 && c.optimizer.beta2 >= 0 &&
                  c.optimizer.beta2 < 1,
              "config: 'optimizer.beta1' and 'optimizer.beta2' must be in [0, 1)");
  non_negative("optimizer.eps", c.optimizer.eps);
  non_negative("optimizer.base_batch", static_cast<double>(c.optimizer.base_batch));
  check_one_of("schedule.name", c.schedule.name, {"constant", "step", "cosine"});
  non_negative("schedule.warmup_steps", static_cast<double>(c.schedule.warmup_steps));
  positive("schedule.step_size", static_cast<double>(c.schedule.step_size));
  BRAID_CHECK(c.model.is_string() || c.model.is_object(),
              "config: 'model' must be a built-in name (mlp, cnn, cnn-bn, gpt-tiny) or an object "
              "with 'input' and 'layers'");
}

nlohmann::json to_json(const TrainConfig& c) {
  const auto& o = c.optimizer;
  const auto& s = c.schedule;
  return {
      {"model", c.model},
      {"dataset", c.dataset},
      {"data_dir", c.data_dir},
      {"npy", c.npy},
      {"text_files", c.text_files},
      {"seq_len", c.seq_len},
      {"epochs", c.epochs},
      {"max_steps", c.max_steps},
      {"batch", c.batch},
      {"seed", c.seed},
      {"threads", c.threads},
      {"clip_grad_norm", c.clip_grad_norm},
      {"augment_flip", c.augment_flip},
      {"augment_crop_pad", c.augment_crop_pad},
      {"augment_erase", c.augment_erase},
      {"label_smoothing", c.label_smoothing},
      {"ema_decay", c.ema_decay},
      {"out", c.out},
      {"log_every", c.log_every},
      {"eval_every", c.eval_every},
      {"eval_batches", c.eval_batches},
      {"checkpoint_every", c.checkpoint_every},
      {"optimizer",
       {{"name", o.name},
        {"lr", o.lr},
        {"momentum", o.momentum},
        {"nesterov", o.nesterov},
        {"weight_decay", o.weight_decay},
        {"beta1", o.beta1},
        {"beta2", o.beta2},
        {"eps", o.eps},
        {"alpha", o.alpha},
        {"trust_coefficient", o.trust_coefficient},
        {"base_batch", o.base_batch}}},
      {"schedule",
       {{"name", s.name},
        {"warmup_steps", s.warmup_steps},
        {"step_size", s.step_size},
        {"gamma", s.gamma},
        {"min_lr", s.min_lr}}},
  };
}

}  // namespace braid::train
