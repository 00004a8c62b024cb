#include "plan/profile.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "core/cpu.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "nn/gpt.h"
#include "nn/gpt_tensor_parallel.h"
#include "nn/module.h"
#include "nn/params.h"
#include "nn/tensor_reducer.h"
#include "optim/adam.h"
#include "train/model_spec.h"

// core/gemm.h sets the count but does not report it; OpenBLAS holds the one it was given.
extern "C" int openblas_get_num_threads(void);

namespace braid::plan {
namespace {

using nlohmann::json;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Two points fitted exactly. Noise can tilt the line below zero at either end; a negative
// time means nothing to the simulator, so the negative term is clamped at 0 and the other
// chosen to keep the larger micro-batch's time exact (the one measured with less noise).
LinearTime fit(int64_t m1, double t1, int64_t m2, double t2) {
  LinearTime t;
  t.per_sample = (t2 - t1) / static_cast<double>(m2 - m1);
  t.fixed = t1 - t.per_sample * static_cast<double>(m1);
  if (t.per_sample < 0) {
    t.per_sample = 0;
    t.fixed = t2;
  } else if (t.fixed < 0) {
    t.fixed = 0;
    t.per_sample = t2 / static_cast<double>(m2);
  }
  return t;
}

int64_t held_bytes() {
  const MemoryCounters c = MemoryTracker::process().snapshot();
  int64_t total = 0;
  for (const int64_t b : c.current) total += b;
  return total;
}

Tensor random_f32(const Shape& shape, Rng& rng) {
  Tensor t = Tensor::empty(shape);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(-1.0f, 1.0f);
  return t;
}

// Sums nothing (one rank stands for all) but counts what a real reducer would move, so a
// slice's messages are those its code sends, not an estimate.
class CountingReducer : public nn::TensorReducer {
 public:
  explicit CountingReducer(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void sum(float* data, size_t count) override { note(data, count); }
  void max(float* data, size_t count) override { note(data, count); }

  void start() {
    counting = true;
    backward = false;
    sums[0] = sums[1] = 0;
    bytes[0] = bytes[1] = 0;
  }

  bool counting = false, backward = false;
  int sums[2] = {0, 0};
  double bytes[2] = {0, 0};

 private:
  void note(float* data, size_t count) {
    (void)data;
    if (!counting) return;
    sums[backward ? 1 : 0] += 1;
    bytes[backward ? 1 : 0] += static_cast<double>(count) * sizeof(float);
  }
  int size_;
};

struct UnitRun {
  LinearTime forward, backward;
  double activation_bytes_per_sample = 0, output_bytes_per_sample = 0;
  std::vector<Tensor> outputs;  // one per micro-batch size, for the next unit
};

// Runs one unit as a pipeline stage would: its own cache, its input kept alive until its
// backward, gradients zeroed before each backward so the first write overwrites as in a
// real step. inputs[i] has sizes[i] samples (sizes ascending).
UnitRun run_unit(nn::Module& module, nn::ParamSet& params, const std::vector<Tensor>& inputs,
                 const std::vector<int64_t>& sizes, bool need_dx, int repeats, Rng& rng,
                 CountingReducer* reducer) {
  UnitRun run;
  nn::ForwardContext ctx;
  std::vector<double> fwd_s(sizes.size()), bwd_s(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool largest = i + 1 == sizes.size();
    const Tensor& x = inputs[i];
    // A throwaway pass first: workspaces a module keeps for itself (not in the cache) and
    // first touches of memory are then out of both the times and the cache's bytes.
    {
      auto warm = module.make_cache();
      const Tensor& y = module.forward(x, *warm, ctx);
      const Tensor dy = random_f32(y.shape(), rng);
      params.zero_grads();
      module.backward(dy, *warm, need_dx);
    }
    auto cache = module.make_cache();
    // The sums of one forward and one backward at the largest size, what a step moves.
    if (largest && reducer) reducer->start();
    const int64_t before = held_bytes();
    const Tensor& y = module.forward(x, *cache, ctx);
    const int64_t kept = held_bytes() - before;
    Tensor out = Tensor::empty(y.shape());
    out.copy_from(y);
    const Tensor dy = random_f32(y.shape(), rng);
    if (reducer) reducer->backward = true;
    params.zero_grads();
    module.backward(dy, *cache, need_dx);
    if (reducer) {
      reducer->counting = false;
      reducer->backward = false;
    }
    if (largest) {
      const double m = static_cast<double>(sizes[i]);
      run.activation_bytes_per_sample = static_cast<double>(std::max<int64_t>(kept, 0)) / m;
      run.output_bytes_per_sample = static_cast<double>(y.numel()) * 4.0 / m;
    }
    std::vector<double> f, b;
    for (int r = 0; r < repeats; ++r) {
      Stopwatch w;
      module.forward(x, *cache, ctx);
      f.push_back(w.lap());
      params.zero_grads();
      w.lap();
      module.backward(dy, *cache, need_dx);
      b.push_back(w.lap());
    }
    fwd_s[i] = median(f);
    bwd_s[i] = median(b);
    run.outputs.push_back(std::move(out));
  }
  run.forward = fit(sizes[0], fwd_s[0], sizes[1], fwd_s[1]);
  run.backward = fit(sizes[0], bwd_s[0], sizes[1], bwd_s[1]);
  return run;
}

double own_params(const nn::ParamSet& params, nn::ParamSet::Id first, nn::ParamSet::Id end) {
  double n = 0;
  for (auto id = first; id < end; ++id) n += static_cast<double>(params.info(id).numel());
  return n;
}

void fill_random(nn::ParamSet& params, Rng& rng) {
  float* p = params.params();
  for (int64_t i = 0; i < params.size(); ++i) p[i] = rng.uniform(-0.02f, 0.02f);
}

// "gpt:d_model=512,layers=8,heads=8": the sizes of a GPT too large to build whole here.
nn::GptConfig parse_gpt_spec(const std::string& spec) {
  static const std::vector<std::string> accepted{"d_model", "layers", "heads",
                                                 "context", "vocab",  "mlp_ratio"};
  const std::string names = "d_model, layers, heads (required); context, vocab, mlp_ratio";
  std::map<std::string, int64_t> v;
  const std::string body = spec.substr(4);
  size_t at = 0;
  while (at <= body.size()) {
    const size_t comma = std::min(body.find(',', at), body.size());
    const std::string item = body.substr(at, comma - at);
    const size_t eq = item.find('=');
    BRAID_CHECK(eq != std::string::npos, "model '", spec, "': '", item,
                "' is not key=value; accepted keys: ", names);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    BRAID_CHECK(std::find(accepted.begin(), accepted.end(), key) != accepted.end(), "model '", spec,
                "': unknown key '", key, "'; accepted keys: ", names);
    BRAID_CHECK(!v.count(key), "model '", spec, "': key '", key, "' given twice");
    size_t used = 0;
    int64_t n = 0;
    try {
      n = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    BRAID_CHECK(used == value.size() && used > 0 && n >= 1 && n <= (int64_t{1} << 31) - 1,
                "model '", spec, "': ", key, " must be a positive integer, got '", value, "'");
    v[key] = n;
    at = comma + 1;
  }
  for (const char* required : {"d_model", "layers", "heads"})
    BRAID_CHECK(v.count(required), "model '", spec, "': missing ", required,
                "; accepted keys: ", names);
  nn::GptConfig c;
  c.d_model = v["d_model"];
  c.layers = v["layers"];
  c.heads = v["heads"];
  if (v.count("context")) c.context = v["context"];
  if (v.count("vocab")) c.vocab = v["vocab"];
  if (v.count("mlp_ratio")) c.mlp_ratio = v["mlp_ratio"];
  BRAID_CHECK(c.d_model % c.heads == 0, "model '", spec, "': d_model ", c.d_model,
              " must be a multiple of heads ", c.heads);
  return c;
}

// The GPT configs measured by one block: the built-ins' sizes are those of build_model.
bool gpt_config(const json& spec, nn::GptConfig& c) {
  if (!spec.is_string()) return false;
  const std::string s = spec.get<std::string>();
  if (s == "gpt-tiny") {
    c = nn::GptConfig{};
    return true;
  }
  if (s == "gpt-small") {
    c = nn::GptConfig{};
    c.d_model = 512;
    c.heads = 8;
    c.layers = 8;
    return true;
  }
  if (s.rfind("gpt:", 0) != 0) return false;
  c = parse_gpt_spec(s);
  return true;
}

TensorSlice measure_slice(const nn::GptConfig& c, int width, const std::vector<Tensor>& inputs,
                          const std::vector<int64_t>& sizes, int repeats, Rng& rng) {
  CountingReducer reducer(width);
  nn::TpGptBlock block(c, reducer);
  nn::ParamSet params;
  block.declare(params, "h.0.");
  params.allocate();
  // TpGptBlock has no init(): its parameters come cut from a full model's. Any values time
  // alike; small ones keep the activations finite.
  fill_random(params, rng);
  const UnitRun run = run_unit(block, params, inputs, sizes, true, repeats, rng, &reducer);
  TensorSlice s;
  s.width = width;
  s.forward = run.forward;
  s.backward = run.backward;
  s.params = static_cast<double>(params.count());
  const double m = static_cast<double>(sizes.back());
  s.forward_sums = reducer.sums[0];
  s.backward_sums = reducer.sums[1];
  s.forward_sum_bytes_per_sample = reducer.bytes[0] / m;
  s.backward_sum_bytes_per_sample = reducer.bytes[1] / m;
  return s;
}

double measure_optimizer(int repeats) {
  constexpr int64_t n = int64_t{1} << 22;
  Tensor p = Tensor::empty({n}, DType::f32, MemCategory::parameters);
  Tensor g = Tensor::empty({n}, DType::f32, MemCategory::gradients);
  Rng rng(7);
  for (int64_t i = 0; i < n; ++i) g.f32()[i] = rng.uniform(-1.0f, 1.0f);
  optim::Adam adam({optim::Segment{"flat", 0, n, true}}, n);
  adam.step(p.f32(), g.f32(), 1e-3f);  // first touch of the moments
  std::vector<double> s;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    Stopwatch w;
    adam.step(p.f32(), g.f32(), 1e-3f);
    s.push_back(w.elapsed());
  }
  return median(s) / static_cast<double>(n);
}

json time_json(const LinearTime& t) { return {{"fixed", t.fixed}, {"per_sample", t.per_sample}}; }

// An object with exactly `keys`; what is missing or extra is an error naming `where`.
void check_keys(const json& j, const std::string& where, const std::vector<std::string>& keys) {
  BRAID_CHECK(j.is_object(), where, ": expected an object, got ", j.type_name());
  std::string list;
  for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
  for (auto it = j.begin(); it != j.end(); ++it)
    BRAID_CHECK(std::find(keys.begin(), keys.end(), it.key()) != keys.end(), where,
                ": unknown key '", it.key(), "' (accepted: ", list, ")");
  for (const auto& k : keys) BRAID_CHECK(j.contains(k), where, ": missing '", k, "'");
}

double number(const json& j, const std::string& key, const std::string& where) {
  BRAID_CHECK(j.at(key).is_number(), where, ".", key, ": expected a number, got ",
              j.at(key).type_name());
  return j.at(key).get<double>();
}

int64_t integer(const json& j, const std::string& key, const std::string& where) {
  BRAID_CHECK(j.at(key).is_number_integer(), where, ".", key, ": expected an integer, got ",
              j.at(key).dump());
  return j.at(key).get<int64_t>();
}

std::string text(const json& j, const std::string& key, const std::string& where) {
  BRAID_CHECK(j.at(key).is_string(), where, ".", key, ": expected a string, got ",
              j.at(key).type_name());
  return j.at(key).get<std::string>();
}

const json& array(const json& j, const std::string& key, const std::string& where) {
  BRAID_CHECK(j.at(key).is_array(), where, ".", key, ": expected an array, got ",
              j.at(key).type_name());
  return j.at(key);
}

LinearTime parse_time(const json& j, const std::string& where) {
  check_keys(j, where, {"fixed", "per_sample"});
  return {number(j, "fixed", where), number(j, "per_sample", where)};
}

}  // namespace

double ModelProfile::params() const {
  double n = 0;
  for (const auto& u : units) n += u.params;
  return n;
}

std::vector<int> ModelProfile::tensor_widths() const {
  std::set<int> common;
  bool first = true;
  for (const auto& u : units) {
    if (u.kind != "GptBlock") continue;
    std::set<int> mine;
    for (const auto& s : u.slices) mine.insert(s.width);
    if (first) {
      common = mine;
      first = false;
    } else {
      std::set<int> both;
      for (const int w : common)
        if (mine.count(w)) both.insert(w);
      common = both;
    }
  }
  common.insert(1);
  return {common.begin(), common.end()};
}

ModelProfile measure_profile(const json& spec, const ProfileOptions& options) {
  BRAID_CHECK(options.micro_batches.size() == 2,
              "profile: exactly two micro-batch sizes are "
              "fitted, got ",
              options.micro_batches.size());
  std::vector<int64_t> sizes = options.micro_batches;
  std::sort(sizes.begin(), sizes.end());
  BRAID_CHECK(sizes[0] >= 1 && sizes[0] < sizes[1],
              "profile: the micro-batch sizes must be "
              "distinct and positive, got ",
              sizes[0], " and ", sizes[1]);
  BRAID_CHECK(options.repeats >= 1, "profile: repeats must be >= 1, got ", options.repeats);

  ModelProfile p;
  p.model = spec;
  p.cpu = cpu_description();
  p.threads = openblas_get_num_threads();
  Rng rng(1234);

  nn::GptConfig gpt;
  const bool is_gpt = gpt_config(spec, gpt);
  std::unique_ptr<nn::Module> module;
  Shape sample;
  DType input_dtype = DType::f32;
  if (is_gpt) {
    BRAID_CHECK(options.seq_len >= 1 && options.seq_len <= gpt.context, "profile: seq_len ",
                options.seq_len, " must be in [1, ", gpt.context, "] (the model's context)");
    nn::GptConfig one = gpt;
    one.layers = 1;  // blocks are alike: one stands for all
    module = nn::make_gpt(one);
    sample = Shape{options.seq_len};
    input_dtype = DType::i32;
    p.seq_len = options.seq_len;
  } else {
    train::BuiltModel built = train::build_model(spec, options.seq_len);
    module = std::move(built.module);
    sample = built.sample_shape;
    input_dtype = built.input_dtype;
    if (built.task == train::Task::language_model) p.seq_len = options.seq_len;
  }
  p.sample_bytes = static_cast<double>(sample.numel() * dtype_size(input_dtype));

  nn::ParamSet params;
  module->declare(params, "");
  params.allocate();
  module->init(rng);
  std::vector<nn::PipelineUnit> units = module->pipeline_units();
  if (units.empty())
    units.push_back({.module = module.get(),
                     .name = "model",
                     .first = 0,
                     .end = params.layout().size(),
                     .buffers_first = 0,
                     .buffers_end = params.buffers().size(),
                     .tied = {}});

  std::vector<Tensor> inputs;
  for (const int64_t m : sizes) {
    std::vector<int64_t> dims{m};
    for (const int64_t d : sample.to_vector()) dims.push_back(d);
    Tensor x = Tensor::empty(Shape(dims), input_dtype, MemCategory::data);
    if (input_dtype == DType::i32) {
      // Token ids of the GPT's vocabulary; any other integer input gets 0, valid in every
      // table, since the values do not change the time.
      int32_t* ids = x.data<int32_t>();
      for (int64_t i = 0; i < x.numel(); ++i)
        ids[i] = is_gpt ? static_cast<int32_t>(rng.below(static_cast<uint64_t>(gpt.vocab))) : 0;
    } else {
      BRAID_CHECK(input_dtype == DType::f32, "profile: input dtype ", dtype_name(input_dtype),
                  " is not supported");
      x = random_f32(x.shape(), rng);
    }
    inputs.push_back(std::move(x));
  }

  std::vector<UnitProfile> measured;
  for (size_t u = 0; u < units.size(); ++u) {
    UnitRun run = run_unit(*units[u].module, params, inputs, sizes, /*need_dx=*/u > 0,
                           options.repeats, rng, nullptr);
    UnitProfile up;
    up.name = units[u].name;
    up.kind = std::string(units[u].module->kind());
    up.forward = run.forward;
    up.backward = run.backward;
    up.params = own_params(params, units[u].first, units[u].end);
    up.activation_bytes_per_sample = run.activation_bytes_per_sample;
    up.output_bytes_per_sample = run.output_bytes_per_sample;
    if (is_gpt && up.kind == "GptBlock") {
      for (const int t : options.tensor_widths)
        if (t > 1 && gpt.heads % t == 0 && (gpt.mlp_ratio * gpt.d_model) % t == 0 &&
            gpt.vocab % t == 0)
          up.slices.push_back(measure_slice(gpt, t, inputs, sizes, options.repeats, rng));
    }
    measured.push_back(std::move(up));
    inputs = std::move(run.outputs);
  }

  if (is_gpt) {
    // [embedding, h.0, head] -> embedding, h.0 .. h.(L-1), head.
    BRAID_CHECK(measured.size() == 3, "profile: a one-block GPT gave ", measured.size(),
                " units, expected 3");
    p.units.push_back(measured[0]);
    for (int64_t i = 0; i < gpt.layers; ++i) {
      UnitProfile b = measured[1];
      b.name = "h." + std::to_string(i);
      p.units.push_back(std::move(b));
    }
    p.units.push_back(measured[2]);
  } else {
    p.units = std::move(measured);
  }
  p.optimizer_s_per_param = measure_optimizer(options.repeats);
  return p;
}

json profile_json(const ModelProfile& p) {
  json units = json::array();
  for (const auto& u : p.units) {
    json slices = json::array();
    for (const auto& s : u.slices)
      slices.push_back({{"width", s.width},
                        {"forward", time_json(s.forward)},
                        {"backward", time_json(s.backward)},
                        {"params", s.params},
                        {"forward_sum_bytes_per_sample", s.forward_sum_bytes_per_sample},
                        {"backward_sum_bytes_per_sample", s.backward_sum_bytes_per_sample},
                        {"forward_sums", s.forward_sums},
                        {"backward_sums", s.backward_sums}});
    units.push_back({{"name", u.name},
                     {"kind", u.kind},
                     {"forward", time_json(u.forward)},
                     {"backward", time_json(u.backward)},
                     {"params", u.params},
                     {"activation_bytes_per_sample", u.activation_bytes_per_sample},
                     {"output_bytes_per_sample", u.output_bytes_per_sample},
                     {"slices", std::move(slices)}});
  }
  return {{"model", p.model},
          {"cpu", p.cpu},
          {"threads", p.threads},
          {"seq_len", p.seq_len},
          {"units", std::move(units)},
          {"optimizer_s_per_param", p.optimizer_s_per_param},
          {"sample_bytes", p.sample_bytes}};
}

ModelProfile parse_profile(const json& j, const std::string& where) {
  check_keys(
      j, where,
      {"model", "cpu", "threads", "seq_len", "units", "optimizer_s_per_param", "sample_bytes"});
  ModelProfile p;
  p.model = j.at("model");
  p.cpu = text(j, "cpu", where);
  p.threads = static_cast<int>(integer(j, "threads", where));
  p.seq_len = integer(j, "seq_len", where);
  p.optimizer_s_per_param = number(j, "optimizer_s_per_param", where);
  p.sample_bytes = number(j, "sample_bytes", where);
  const json& units = array(j, "units", where);
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string uw = where + ".units[" + std::to_string(i) + "]";
    const json& ju = units[i];
    check_keys(ju, uw,
               {"name", "kind", "forward", "backward", "params", "activation_bytes_per_sample",
                "output_bytes_per_sample", "slices"});
    UnitProfile u;
    u.name = text(ju, "name", uw);
    u.kind = text(ju, "kind", uw);
    u.forward = parse_time(ju.at("forward"), uw + ".forward");
    u.backward = parse_time(ju.at("backward"), uw + ".backward");
    u.params = number(ju, "params", uw);
    u.activation_bytes_per_sample = number(ju, "activation_bytes_per_sample", uw);
    u.output_bytes_per_sample = number(ju, "output_bytes_per_sample", uw);
    const json& slices = array(ju, "slices", uw);
    for (size_t k = 0; k < slices.size(); ++k) {
      const std::string sw = uw + ".slices[" + std::to_string(k) + "]";
      const json& js = slices[k];
      check_keys(js, sw,
                 {"width", "forward", "backward", "params", "forward_sum_bytes_per_sample",
                  "backward_sum_bytes_per_sample", "forward_sums", "backward_sums"});
      TensorSlice s;
      s.width = static_cast<int>(integer(js, "width", sw));
      s.forward = parse_time(js.at("forward"), sw + ".forward");
      s.backward = parse_time(js.at("backward"), sw + ".backward");
      s.params = number(js, "params", sw);
      s.forward_sum_bytes_per_sample = number(js, "forward_sum_bytes_per_sample", sw);
      s.backward_sum_bytes_per_sample = number(js, "backward_sum_bytes_per_sample", sw);
      s.forward_sums = static_cast<int>(integer(js, "forward_sums", sw));
      s.backward_sums = static_cast<int>(integer(js, "backward_sums", sw));
      u.slices.push_back(s);
    }
    p.units.push_back(std::move(u));
  }
  return p;
}

}  // namespace braid::plan
