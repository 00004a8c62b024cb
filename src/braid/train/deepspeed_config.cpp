// DeepSpeed's config keys mapped onto braid's (see deepspeed_config.h). DeepSpeed's meanings
// are those of deepspeed/runtime/config.py (the batch: _configure_train_batch_size) and of
// https://www.deepspeed.ai/docs/config-json/.
#include "train/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "train/settings.h"

namespace braid::train {
namespace {

using nlohmann::json;

// Keys that change nothing in braid's arithmetic (logging, profiling, memory layout):
// accepted with a note. The one table of them; every other key maps or is refused.
const std::map<std::string, std::string>& noop_keys() {
  static const std::map<std::string, std::string> table = {
      {"steps_per_print", "braid prints progress every log_every steps"},
      {"wall_clock_breakdown", "braid's --timeline traces every step"},
      {"memory_breakdown", "a DeepSpeed log"},
      {"dump_state", "a DeepSpeed log"},
      {"flops_profiler", "a DeepSpeed profiler"},
      {"tensorboard", "braid writes metrics.jsonl (braid plot)"},
      {"wandb", "braid writes metrics.jsonl (braid plot)"},
      {"csv_monitor", "braid writes metrics.jsonl (braid plot)"},
      {"comms_logger", "a DeepSpeed log"},
      {"zero_allow_untested_optimizer", "every braid optimizer runs under ZeRO"},
      {"zero_force_ds_cpu_optimizer", "braid has one optimizer implementation"},
      {"zero_optimization.overlap_comm", "braid overlaps buckets as it does (bucket_mb)"},
      {"zero_optimization.contiguous_gradients", "braid's gradients are one flat buffer"},
      {"zero_optimization.allgather_partitions", "memory layout only"},
      {"zero_optimization.reduce_scatter", "memory layout only"},
      {"zero_optimization.allgather_bucket_size", "a bucket's size changes no value (bucket_mb)"},
      {"zero_optimization.reduce_bucket_size", "a bucket's size changes no value (bucket_mb)"},
      {"zero_optimization.round_robin_gradients", "memory layout only"},
      {"zero_optimization.stage3_prefetch_bucket_size", "memory layout only"},
      {"zero_optimization.stage3_param_persistence_threshold", "memory layout only"},
      {"zero_optimization.stage3_max_live_parameters", "memory layout only"},
      {"zero_optimization.stage3_max_reuse_distance", "memory layout only"},
      {"zero_optimization.sub_group_size", "memory layout only"},
      {"optimizer.params.torch_adam", "braid has one Adam"},
  };
  return table;
}

// The parse state: the file's name for errors, what has been mapped, the notes.
class Mapper {
 public:
  Mapper(std::string source, int64_t world) : source_(std::move(source)), world_(world) {}

  DeepSpeedMapping run(const json& ds) {
    if (!ds.is_object())
      BRAID_THROW(Error, source_, ": a DeepSpeed config is a JSON object, got ", ds.type_name());
    for (auto it = ds.begin(); it != ds.end(); ++it) {
      const std::string& key = it.key();
      if (key == "train_batch_size" || key == "train_micro_batch_size_per_gpu" ||
          key == "gradient_accumulation_steps")
        continue;  // batch() reads the three together
      if (key == "optimizer")
        optimizer(*it);
      else if (key == "scheduler")
        scheduler(*it);
      else if (key == "fp16")
        fp16(*it);
      else if (key == "bf16" || key == "bfloat16")
        bf16(key, *it);
      else if (key == "zero_optimization")
        zero(*it);
      else if (key == "gradient_clipping")
        out_.config["clip_grad_norm"] = number(key, *it, 0);
      else if (key == "communication_data_type")
        comm_dtype(*it);
      else if (key == "prescale_gradients")
        require(key, *it, json(false), "braid averages gradients after the sum");
      else if (key == "gradient_predivide_factor")
        require(key, *it, json(1.0), "braid divides the summed gradients once, by the ranks");
      else if (key == "sparse_gradients")
        require(key, *it, json(false), "braid's gradients are dense");
      else if (!noop(key))
        refuse(key,
               "is not a DeepSpeed key braid maps (it maps the batch sizes, optimizer, "
               "scheduler, fp16, bf16, zero_optimization, gradient_clipping and "
               "communication_data_type); remove it or set braid's own key in --config");
    }
    batch(ds);
    if (out_.config.value("precision_fp16", false) && out_.config.value("precision_bf16", false))
      BRAID_THROW(Error, source_, ": 'fp16.enabled' and 'bf16.enabled' are both true; enable one");
    for (const char* k : {"precision_fp16", "precision_bf16"}) {
      if (!out_.config.contains(k)) continue;
      if (out_.config[k].get<bool>()) out_.config["precision"] = std::string(k).substr(10);
      out_.config.erase(k);
    }
    // "fp16.hysteresis" written as braid's config nests it: {"fp16": {"hysteresis": ...}}.
    json nested = json::object();
    for (auto it = out_.config.begin(); it != out_.config.end(); ++it) {
      const size_t dot = it.key().find('.');
      if (dot == std::string::npos)
        nested[it.key()] = *it;
      else
        nested[it.key().substr(0, dot)][it.key().substr(dot + 1)] = *it;
    }
    out_.config = std::move(nested);
    return std::move(out_);
  }

 private:
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    BRAID_THROW(Error, source_, ": '", key, "' ", why);
  }

  bool noop(const std::string& key) {
    const auto it = noop_keys().find(key);
    if (it == noop_keys().end()) return false;
    out_.notes.push_back(source_ + ": '" + key + "' changes nothing in braid (" + it->second +
                         "); accepted");
    return true;
  }

  // A key whose only value braid honours is `want` (DeepSpeed's default).
  void require(const std::string& key, const json& v, const json& want, const std::string& why) {
    const bool same =
        v.is_number() && want.is_number() ? v.get<double>() == want.get<double>() : v == want;
    if (!same)
      refuse(key, "is " + v.dump() + "; braid honours only " + want.dump() + " (" + why +
                      "); remove the key");
  }

  double number(const std::string& key, const json& v, double lo) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo)
      refuse(key, "must be a number >= " + json(lo).dump() + ", got " + v.dump());
    return v.get<double>();
  }

  int64_t integer(const std::string& key, const json& v, int64_t lo) const {
    if (v.is_string())
      refuse(key, "is " + v.dump() + ": write the number (\"auto\" is filled in by Hugging " +
                      std::string("Face's Trainer, not by DeepSpeed)"));
    const bool integral = v.is_number_integer() ||
                          (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
                           std::abs(v.get<double>()) < 9.0e18);
    if (!integral || v.get<double>() < static_cast<double>(lo))
      refuse(key, "must be an integer >= " + std::to_string(lo) + ", got " + v.dump());
    return v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
  }

  bool boolean(const std::string& key, const json& v) const {
    if (!v.is_boolean()) refuse(key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }

  void object(const std::string& key, const json& v) const {
    if (!v.is_object()) refuse(key, "must be an object, got " + v.dump());
  }

  // DeepSpeed's _configure_train_batch_size: two of the three sizes derive the third; all
  // three must agree (train = micro x gas x world).
  void batch(const json& ds) {
    const bool has_train = ds.contains("train_batch_size");
    const bool has_micro = ds.contains("train_micro_batch_size_per_gpu");
    const bool has_gas = ds.contains("gradient_accumulation_steps");
    if (!has_train && !has_micro && !has_gas) return;  // the batch stays --config's
    const int64_t train = has_train ? integer("train_batch_size", ds["train_batch_size"], 1) : 0;
    int64_t micro = has_micro ? integer("train_micro_batch_size_per_gpu",
                                        ds["train_micro_batch_size_per_gpu"], 1)
                              : 0;
    int64_t gas =
        has_gas ? integer("gradient_accumulation_steps", ds["gradient_accumulation_steps"], 1) : 0;
    const std::string ranks = std::to_string(world_) + (world_ == 1 ? " rank" : " ranks");
    if (has_train && has_micro && has_gas) {
      if (train != micro * gas * world_)
        BRAID_THROW(Error, source_, ": train_batch_size ", train,
                    " is not train_micro_batch_size_per_gpu ", micro,
                    " x gradient_accumulation_steps ", gas, " x ", ranks,
                    " (= ", micro * gas * world_,
                    "); fix one of the three, or give two and the third is derived");
    } else if (has_train && has_micro) {
      if (train % (micro * world_) != 0)
        BRAID_THROW(Error, source_, ": train_batch_size ", train,
                    " is not a multiple of train_micro_batch_size_per_gpu ", micro, " x ", ranks,
                    ", so no gradient_accumulation_steps fits; change one of them");
      gas = train / (micro * world_);
    } else if (has_train && has_gas) {
      if (train % (gas * world_) != 0)
        BRAID_THROW(Error, source_, ": train_batch_size ", train,
                    " is not a multiple of gradient_accumulation_steps ", gas, " x ", ranks,
                    ", so no train_micro_batch_size_per_gpu fits; change one of them");
      micro = train / (gas * world_);
    } else if (has_micro) {
      gas = has_gas ? gas : 1;  // DeepSpeed's default
    } else if (has_train) {
      if (train % world_ != 0)
        BRAID_THROW(Error, source_, ": train_batch_size ", train, " does not divide over ", ranks,
                    "; give a multiple of ", world_, " or train_micro_batch_size_per_gpu");
      gas = 1;
      micro = train / world_;
    } else {
      BRAID_THROW(Error, source_,
                  ": gradient_accumulation_steps alone does not give a batch; add "
                  "train_batch_size or train_micro_batch_size_per_gpu (as DeepSpeed requires)");
    }
    // braid's batch is per rank and accumulate_steps cuts it into micro-batches.
    out_.config["batch"] = micro * gas;
    out_.config["accumulate_steps"] = gas;
    out_.config["global_batch"] = 0;  // the batch is per rank, as DeepSpeed's
  }

  void check_keys(const std::string& where, const json& obj,
                  const std::vector<std::string>& known) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const std::string key = where + "." + it.key();
      if (std::find(known.begin(), known.end(), it.key()) != known.end() || noop(key)) continue;
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      refuse(key, "is not a key braid maps; in '" + where + "' it maps: " + list);
    }
  }

  void fp16(const json& v) {
    object("fp16", v);
    check_keys("fp16", v,
               {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                "min_loss_scale", "consecutive_hysteresis", "auto_cast"});
    if (v.contains("enabled"))
      out_.config["precision_fp16"] = boolean("fp16.enabled", v["enabled"]);
    if (v.contains("auto_cast"))
      require("fp16.auto_cast", v["auto_cast"], json(false),
              "braid casts the GEMMs' operands only (precision fp16)");
    if (v.contains("consecutive_hysteresis"))
      require("fp16.consecutive_hysteresis", v["consecutive_hysteresis"], json(false),
              "braid's hysteresis is spent across clean steps, as DeepSpeed's default");
    if (v.contains("min_loss_scale"))
      require("fp16.min_loss_scale", v["min_loss_scale"], json(1),
              "braid's loss scale never falls below 1, DeepSpeed's default");
    if (v.contains("initial_scale_power"))
      out_.config["fp16.initial_scale_power"] =
          integer("fp16.initial_scale_power", v["initial_scale_power"], 0);
    if (v.contains("loss_scale_window"))
      out_.config["fp16.loss_scale_window"] =
          integer("fp16.loss_scale_window", v["loss_scale_window"], 1);
    if (v.contains("hysteresis"))
      out_.config["fp16.hysteresis"] = integer("fp16.hysteresis", v["hysteresis"], 1);
    const double scale =
        v.contains("loss_scale") ? number("fp16.loss_scale", v["loss_scale"], 0) : 0;
    if (scale == 0) return;  // dynamic loss scaling
    // A static scale: braid's dynamic scaler that never grows (a window past any run) and
    // halves only after 2^20 overflows (hysteresis); like DeepSpeed's static scale, it
    // skips each step that overflows.
    int exponent = 0;
    const double mantissa = std::frexp(scale, &exponent);
    if (mantissa != 0.5 || exponent - 1 < 0 || exponent - 1 > 64)
      refuse(
          "fp16.loss_scale",
          "is " + v["loss_scale"].dump() +
              ": braid's loss scale is a power of two in [1, 2^64] (2^fp16.initial_scale_power); "
              "give one (e.g. 1024), or 0 for dynamic scaling");
    for (const char* k : {"initial_scale_power", "loss_scale_window", "hysteresis"})
      if (v.contains(k))
        refuse(std::string("fp16.") + k,
               "is set with a static fp16.loss_scale; it applies to dynamic scaling only (set "
               "loss_scale 0, or remove it)");
    out_.config["fp16.initial_scale_power"] = exponent - 1;
    out_.config["fp16.loss_scale_window"] = kMaxSteps;
    out_.config["fp16.hysteresis"] = int64_t{1} << 20;
    out_.notes.push_back(source_ + ": 'fp16.loss_scale' " + v["loss_scale"].dump() +
                         " is static: braid's scaler starts at 2^" + std::to_string(exponent - 1) +
                         ", never grows, and would halve only after 2^20 overflowed steps");
  }

  void bf16(const std::string& key, const json& v) {
    object(key, v);
    check_keys(key, v, {"enabled"});
    if (v.contains("enabled"))
      out_.config["precision_bf16"] = boolean(key + ".enabled", v["enabled"]);
  }

  void zero(const json& v) {
    if (v.is_boolean()) {  // DeepSpeed's older form: true is stage 1
      out_.config["zero_stage"] = v.get<bool>() ? 1 : 0;
      return;
    }
    object("zero_optimization", v);
    check_keys("zero_optimization", v, {"stage"});
    if (v.contains("stage")) {
      const int64_t stage = integer("zero_optimization.stage", v["stage"], 0);
      if (stage > 3) refuse("zero_optimization.stage", "is " + std::to_string(stage) + "; 0 to 3");
      out_.config["zero_stage"] = stage;
    }
  }

  void comm_dtype(const json& v) {
    static const std::map<std::string, std::string> names = {
        {"fp32", "fp32"}, {"fp16", "fp16"}, {"bf16", "bf16"}, {"bfp16", "bf16"}};
    const auto it = v.is_string() ? names.find(v.get<std::string>()) : names.end();
    if (it == names.end())
      refuse("communication_data_type", "is " + v.dump() + "; braid sends fp32, fp16 or bf16");
    out_.config["comm_dtype"] = it->second;
  }

  void optimizer(const json& v) {
    object("optimizer", v);
    check_keys("optimizer", v, {"type", "params"});
    if (!v.contains("type") || !v["type"].is_string())
      refuse("optimizer.type", "must name the optimizer (Adam, AdamW, SGD, Adagrad, Lamb)");
    std::string type = v["type"].get<std::string>();
    for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const json params = v.value("params", json::object());
    object("optimizer.params", params);
    json& o = out_.config["optimizer"];
    o = json::object();
    // DeepSpeed builds the optimizer from this block alone, so a parameter it leaves out
    // takes DeepSpeed's (PyTorch's) default, not braid's.
    auto param = [&](const char* k, double fallback) {
      return params.contains(k) ? number(std::string("optimizer.params.") + k, params[k], 0)
                                : fallback;
    };
    auto betas = [&] {
      if (!params.contains("betas")) return;
      const json& b = params["betas"];
      if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number())
        refuse("optimizer.params.betas", "must be [beta1, beta2], got " + b.dump());
      o["beta1"] = b[0].get<double>();
      o["beta2"] = b[1].get<double>();
    };
    if (type == "adam" || type == "adamw") {
      check_keys(
          "optimizer.params", params,
          {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction", "amsgrad"});
      // DeepSpeed's Adam is FusedAdam with adam_w_mode true: AdamW's decoupled weight decay.
      bool w_mode = true;
      if (type == "adam" && params.contains("adam_w_mode"))
        w_mode = boolean("optimizer.params.adam_w_mode", params["adam_w_mode"]);
      else if (params.contains("adam_w_mode"))
        refuse("optimizer.params.adam_w_mode", "belongs to type Adam; AdamW always decouples");
      if (params.contains("bias_correction"))
        require("optimizer.params.bias_correction", params["bias_correction"], json(true),
                "braid's Adam corrects its moments' bias");
      if (params.contains("amsgrad"))
        require("optimizer.params.amsgrad", params["amsgrad"], json(false), "braid has no AMSGrad");
      o["name"] = w_mode ? "adamw" : "adam";
      o["lr"] = param("lr", 1e-3);
      o["beta1"] = 0.9;
      o["beta2"] = 0.999;
      betas();
      o["eps"] = param("eps", 1e-8);
      o["weight_decay"] = param("weight_decay", 0);
    } else if (type == "sgd") {
      check_keys("optimizer.params", params,
                 {"lr", "momentum", "weight_decay", "nesterov", "dampening"});
      if (!params.contains("lr"))
        refuse("optimizer.params.lr", "is required by SGD (PyTorch's SGD has no default lr)");
      if (params.contains("dampening"))
        require("optimizer.params.dampening", params["dampening"], json(0),
                "braid's SGD has no dampening");
      o["name"] = "sgd";
      o["lr"] = param("lr", 0);
      o["momentum"] = param("momentum", 0);
      o["weight_decay"] = param("weight_decay", 0);
      o["nesterov"] = params.contains("nesterov")
                          ? boolean("optimizer.params.nesterov", params["nesterov"])
                          : false;
    } else if (type == "adagrad") {
      check_keys("optimizer.params", params, {"lr", "eps", "weight_decay"});
      o["name"] = "adagrad";
      o["lr"] = param("lr", 1e-2);
      o["eps"] = param("eps", 1e-10);
      o["weight_decay"] = param("weight_decay", 0);
    } else if (type == "lamb") {
      // DeepSpeed's Lamb is FusedLamb (deepspeed/ops/lamb/fused_lamb.py): braid's lamb in
      // its deepspeed form (optim/lamb.h), with FusedLamb's defaults.
      check_keys("optimizer.params", params,
                 {"lr", "betas", "eps", "weight_decay", "bias_correction", "max_coeff", "min_coeff",
                  "eps_inside_sqrt", "max_grad_norm", "amsgrad"});
      if (params.contains("eps_inside_sqrt"))
        require("optimizer.params.eps_inside_sqrt", params["eps_inside_sqrt"], json(false),
                "braid's lamb adds eps outside the square root");
      if (params.contains("max_grad_norm"))
        require("optimizer.params.max_grad_norm", params["max_grad_norm"], json(0),
                "set gradient_clipping, which clips the global norm before every optimizer");
      if (params.contains("amsgrad"))
        require("optimizer.params.amsgrad", params["amsgrad"], json(false),
                "FusedLamb has no AMSGrad either");
      o["name"] = "lamb";
      o["lamb_form"] = "deepspeed";
      o["lr"] = param("lr", 1e-3);
      o["beta1"] = 0.9;
      o["beta2"] = 0.999;
      betas();
      o["eps"] = param("eps", 1e-8);
      o["weight_decay"] = param("weight_decay", 0);
      o["min_trust"] = param("min_coeff", 0.01);
      o["max_trust"] = param("max_coeff", 10.0);
      if (o["max_trust"].get<double>() < o["min_trust"].get<double>())
        refuse("optimizer.params.max_coeff", "is below min_coeff");
      o["bias_correction"] =
          params.contains("bias_correction")
              ? boolean("optimizer.params.bias_correction", params["bias_correction"])
              : true;
      if (o["weight_decay"].get<double>() > 0)
        out_.notes.push_back(source_ +
                             ": 'optimizer.params.weight_decay' skips biases and normalisation "
                             "weights in braid, as its every optimizer does (DeepSpeed decays "
                             "what the model's parameter groups say); every tensor still takes "
                             "FusedLamb's trust ratio");
    } else {
      refuse("optimizer.type",
             "is " + v["type"].dump() +
                 ": braid maps Adam, AdamW, SGD, Adagrad and Lamb; its others (rmsprop, lars, "
                 "onebit_adam) are set with optimizer.name in --config");
    }
  }

  // DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR (deepspeed/runtime/lr_schedules.py).
  // DeepSpeed sets the lr once when the scheduler is built (the first optimizer step's) and
  // steps the scheduler after each optimizer step, so optimizer step s >= 1 runs at its
  // formula at iteration s - 1 and step 0 at its initial value: braid's schedule.lag_steps 1.
  // With W = max(2, warmup_num_steps) and i the iteration, the warm-up (i < W) is
  // start + (peak - start) * g, g = ln(i + 1) / ln(W) ('log') or i / W ('linear'); then
  // WarmupLR holds warmup_max_lr, WarmupDecayLR decays linearly to warmup_min_lr at
  // total_num_steps T, WarmupCosineLR is lr x (cos_min_ratio + (1 - cos_min_ratio) x
  // (1 + cos(pi (i - W + 1) / (T - W))) / 2).
  void scheduler(const json& v) {
    object("scheduler", v);
    check_keys("scheduler", v, {"type", "params"});
    const std::string type =
        v.contains("type") && v["type"].is_string() ? v["type"].get<std::string>() : "";
    if (type != "WarmupLR" && type != "WarmupDecayLR" && type != "WarmupCosineLR")
      refuse("scheduler.type",
             "is " + (v.contains("type") ? v["type"].dump() : std::string("missing")) +
                 ": braid maps WarmupLR, WarmupDecayLR and WarmupCosineLR; for another, set "
                 "braid's schedule.name (constant, step, cosine, linear, warmup_cosine), "
                 "schedule.warmup_steps and schedule.warmup_type in --config instead");
    const json params = v.value("params", json::object());
    object("scheduler.params", params);
    const bool cosine = type == "WarmupCosineLR";
    std::vector<std::string> known = {"warmup_num_steps", "warmup_type", "last_batch_iteration"};
    if (type != "WarmupLR") known.push_back("total_num_steps");
    if (cosine) {
      known.insert(known.end(), {"warmup_min_ratio", "cos_min_ratio"});
    } else {
      known.insert(known.end(), {"warmup_min_lr", "warmup_max_lr"});
    }
    check_keys("scheduler.params", params, known);
    const auto key = [](const char* k) { return std::string("scheduler.params.") + k; };
    if (params.contains("last_batch_iteration"))
      require(key("last_batch_iteration"), params["last_batch_iteration"], json(-1),
              "a run starts at step 0; braid resumes from its own checkpoints");
    json& s = out_.config["schedule"];
    s = json::object();
    const int64_t given = params.contains("warmup_num_steps")
                              ? integer(key("warmup_num_steps"), params["warmup_num_steps"], 0)
                              : 1000;
    const int64_t warmup = std::max<int64_t>(2, given);  // DeepSpeed's max(2, ...)
    if (warmup != given)
      out_.notes.push_back(source_ + ": 'scheduler.params.warmup_num_steps' " +
                           std::to_string(given) + " is 2 in DeepSpeed (at least 2 steps)");
    std::string ramp = "log";
    if (params.contains("warmup_type")) {
      const json& t = params["warmup_type"];
      if (t != json("log") && t != json("linear"))
        refuse(key("warmup_type"), "is " + t.dump() + "; braid maps 'log' and 'linear'");
      ramp = t.get<std::string>();
    }
    s["warmup_steps"] = warmup;
    s["warmup_type"] = ramp;
    s["lag_steps"] = 1;
    int64_t total = 0;
    if (type != "WarmupLR") {
      if (!params.contains("total_num_steps"))
        refuse(key("total_num_steps"), "is required by " + type);
      total = integer(key("total_num_steps"), params["total_num_steps"], 1);
      if (total <= warmup)
        refuse(key("total_num_steps"), "is " + std::to_string(total) +
                                           ": braid needs it > the warm-up's " +
                                           std::to_string(warmup) + " steps (warmup_num_steps)");
      s["total_steps"] = total;
    }
    if (cosine) {
      const double start = params.contains("warmup_min_ratio")
                               ? number(key("warmup_min_ratio"), params["warmup_min_ratio"], 0)
                               : 0.0;
      if (start != 0)
        refuse(key("warmup_min_ratio"),
               "is " + params["warmup_min_ratio"].dump() +
                   ": DeepSpeed's WarmupCosineLR runs its first step at lr 0 whatever the "
                   "ratio (its value before the first step()), and braid's warm-up would start "
                   "at the ratio; braid maps only 0 (the default)");
      const double floor = params.contains("cos_min_ratio")
                               ? number(key("cos_min_ratio"), params["cos_min_ratio"], 0)
                               : 0.0001;
      if (floor > 1)
        refuse(key("cos_min_ratio"),
               "is " + params["cos_min_ratio"].dump() + "; braid maps [0, 1]");
      s["name"] = "warmup_cosine";
      s["warmup_start_ratio"] = 0.0;
      s["min_ratio"] = floor;
      out_.notes.push_back(source_ +
                           ": WarmupCosineLR past total_num_steps: DeepSpeed's cosine rises "
                           "again, braid's holds lr x cos_min_ratio");
    } else {
      const double lo = params.contains("warmup_min_lr")
                            ? number(key("warmup_min_lr"), params["warmup_min_lr"], 0)
                            : 0.0;
      const double hi = params.contains("warmup_max_lr")
                            ? number(key("warmup_max_lr"), params["warmup_max_lr"], 0)
                            : 0.001;
      if (hi <= 0 || lo > hi)
        refuse(key("warmup_max_lr"), "is " + json(hi).dump() +
                                         ": braid needs it > 0 and >= warmup_min_lr " +
                                         json(lo).dump());
      // warmup_max_lr replaces the optimizer's lr (DeepSpeed overwrites it).
      json& o = out_.config["optimizer"];
      if (o.contains("lr") && o["lr"].get<double>() != hi)
        out_.notes.push_back(source_ + ": 'optimizer.params.lr' " + o["lr"].dump() +
                             " is replaced by 'scheduler.params.warmup_max_lr' " + json(hi).dump() +
                             ", as in DeepSpeed");
      o["lr"] = hi;
      s["name"] = type == "WarmupLR" ? "constant" : "linear";
      s["warmup_start_ratio"] = lo / hi;
      if (type == "WarmupDecayLR") s["min_lr"] = lo;
    }
    if (out_.config.value("precision_fp16", false))
      out_.notes.push_back(source_ +
                           ": under fp16, DeepSpeed does not step its scheduler on a step "
                           "skipped for overflow and braid's schedule counts it, so the lr "
                           "runs one step ahead per skipped step");
  }

  std::string source_;
  int64_t world_;
  DeepSpeedMapping out_;
};

}  // namespace

DeepSpeedMapping map_deepspeed_config(const json& ds, int64_t data_world,
                                      const std::string& source) {
  BRAID_CHECK(data_world >= 1, source, ": the data-parallel ranks must be >= 1, got ", data_world);
  return Mapper(source, data_world).run(ds);
}

DeepSpeedMapping load_deepspeed_config(const std::string& path, int64_t data_world) {
  std::ifstream in(path);
  if (!in) BRAID_THROW(IoError, "--deepspeed '", path, "': cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  json ds;
  try {
    ds = json::parse(text.str());
  } catch (const json::parse_error& e) {
    BRAID_THROW(Error, "--deepspeed '", path, "' is not JSON: ", e.what());
  }
  return map_deepspeed_config(ds, data_world, "--deepspeed '" + path + "'");
}

}  // namespace braid::train
