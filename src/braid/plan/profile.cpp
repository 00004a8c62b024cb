#include "plan/profile.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>

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
  void sum(float*, size_t count) override { note(count); }
  void max(float*, size_t count) override { note(count); }

  int phase = -1;  // what is counted: 0 forward, 1 backward, -1 nothing
  int sums[2] = {0, 0};
  double bytes[2] = {0, 0};

 private:
  void note(size_t count) {
    if (phase < 0) return;
    sums[phase] += 1;
    bytes[phase] += static_cast<double>(count) * sizeof(float);
  }
  int size_;
};

// Runs one unit as a pipeline stage would: its own cache, its input kept alive until its
// backward, gradients zeroed before each backward so the first write overwrites as in a
// real step. inputs[i] has sizes[i] samples (sizes ascending); `outputs` gets the outputs,
// the next unit's inputs. Fills the times and the bytes.
UnitProfile run_unit(nn::Module& module, nn::ParamSet& params, const std::vector<Tensor>& inputs,
                     const std::vector<int64_t>& sizes, bool need_dx, int repeats, Rng& rng,
                     CountingReducer* reducer, std::vector<Tensor>* outputs = nullptr) {
  UnitProfile run;
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
    if (largest && reducer) reducer->phase = 0;
    const int64_t before = held_bytes();
    const Tensor& y = module.forward(x, *cache, ctx);
    const int64_t kept = held_bytes() - before;
    Tensor out = Tensor::empty(y.shape());
    out.copy_from(y);
    const Tensor dy = random_f32(y.shape(), rng);
    if (reducer && reducer->phase == 0) reducer->phase = 1;
    params.zero_grads();
    module.backward(dy, *cache, need_dx);
    if (reducer) reducer->phase = -1;
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
    if (outputs) outputs->push_back(std::move(out));
  }
  run.forward = fit(sizes[0], fwd_s[0], sizes[1], fwd_s[1]);
  run.backward = fit(sizes[0], bwd_s[0], sizes[1], bwd_s[1]);
  return run;
}

// "gpt:d_model=512,layers=8,heads=8": the sizes of a GPT too large to build whole here.
nn::GptConfig parse_gpt_spec(const std::string& spec) {
  const std::map<std::string, int64_t nn::GptConfig::*> fields{
      {"d_model", &nn::GptConfig::d_model}, {"layers", &nn::GptConfig::layers},
      {"heads", &nn::GptConfig::heads},     {"context", &nn::GptConfig::context},
      {"vocab", &nn::GptConfig::vocab},     {"mlp_ratio", &nn::GptConfig::mlp_ratio}};
  const std::string names = "d_model, layers, heads (required); context, vocab, mlp_ratio";
  nn::GptConfig c;
  std::vector<std::string> seen;
  const std::string body = spec.substr(4);
  for (size_t at = 0; at <= body.size();) {
    const size_t comma = std::min(body.find(',', at), body.size());
    const std::string item = body.substr(at, comma - at);
    at = comma + 1;
    const size_t eq = item.find('=');
    BRAID_CHECK(eq != std::string::npos, "model '", spec, "': '", item,
                "' is not key=value; accepted keys: ", names);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    BRAID_CHECK(fields.count(key), "model '", spec, "': unknown key '", key,
                "'; accepted keys: ", names);
    BRAID_CHECK(std::find(seen.begin(), seen.end(), key) == seen.end(), "model '", spec, "': key '",
                key, "' given twice");
    int64_t n = 0;
    const char* end = value.data() + value.size();
    const auto [stop, ec] = std::from_chars(value.data(), end, n);
    BRAID_CHECK(ec == std::errc() && stop == end && n >= 1 && n <= (int64_t{1} << 31) - 1,
                "model '", spec, "': ", key, " must be a positive integer, got '", value, "'");
    c.*fields.at(key) = n;
    seen.push_back(key);
  }
  for (const char* required : {"d_model", "layers", "heads"})
    BRAID_CHECK(std::find(seen.begin(), seen.end(), required) != seen.end(), "model '", spec,
                "': missing ", required, "; accepted keys: ", names);
  BRAID_CHECK(c.d_model % c.heads == 0, "model '", spec, "': d_model ", c.d_model,
              " must be a multiple of heads ", c.heads);
  return c;
}

// The GPT configs measured by one block: the built-ins' sizes are those of build_model.
bool gpt_config(const json& spec, nn::GptConfig& c) {
  if (!spec.is_string()) return false;
  const std::string s = spec.get<std::string>();
  c = nn::GptConfig{};
  if (s == "gpt-small") {
    c.d_model = 512;
    c.heads = 8;
    c.layers = 8;
  } else if (s.rfind("gpt:", 0) == 0) {
    c = parse_gpt_spec(s);
  } else {
    return s == "gpt-tiny";
  }
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
  for (int64_t i = 0; i < params.size(); ++i) params.params()[i] = rng.uniform(-0.02f, 0.02f);
  const UnitProfile run = run_unit(block, params, inputs, sizes, true, repeats, rng, &reducer);
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

// Reads an object's keys, each checked for its type; done() then rejects the keys nobody
// read, so a misspelt key is an error rather than a silently default value.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    BRAID_CHECK(j.is_object(), where_, ": expected an object, got ", j.type_name());
  }
  // The value of `key`, which `is` (when given) must accept.
  const json& get(const std::string& key, bool (json::*is)() const noexcept = nullptr,
                  const char* what = "") {
    BRAID_CHECK(j_.contains(key), where_, ": missing '", key, "'");
    read_.push_back(key);
    const json& v = j_.at(key);
    BRAID_CHECK(!is || (v.*is)(), where_, ".", key, ": expected ", what, ", got ", v.dump());
    return v;
  }
  bool has(const std::string& k) const { return j_.contains(k); }
  double number(const std::string& k) { return get(k, &json::is_number, "a number"); }
  int64_t integer(const std::string& k) {
    return get(k, &json::is_number_integer, "an integer").get<int64_t>();
  }
  std::string text(const std::string& k) { return get(k, &json::is_string, "a string"); }
  const json& array(const std::string& k) { return get(k, &json::is_array, "an array"); }
  LinearTime time(const std::string& key) {
    Reader r(get(key), where_ + "." + key);
    const LinearTime t{r.number("fixed"), r.number("per_sample")};
    r.done();
    return t;
  }
  void done() const {
    std::string list;
    for (const auto& k : read_) list += (list.empty() ? "" : ", ") + k;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      BRAID_CHECK(std::find(read_.begin(), read_.end(), it.key()) != read_.end(), where_,
                  ": unknown key '", it.key(), "' (accepted: ", list, ")");
  }

 private:
  const json& j_;
  std::string where_;
  std::vector<std::string> read_;
};

}  // namespace

double ModelProfile::params() const {
  double n = 0;
  for (const auto& u : units) n += u.params;
  return n;
}

std::vector<int> ModelProfile::tensor_widths() const {
  std::vector<int> widths{1};
  std::vector<const UnitProfile*> blocks;
  for (const auto& u : units)
    if (u.kind == "GptBlock") blocks.push_back(&u);
  if (blocks.empty()) return widths;
  for (const auto& s : blocks[0]->slices) {
    const auto has = [&](const UnitProfile* b) {
      return std::any_of(b->slices.begin(), b->slices.end(),
                         [&](const TensorSlice& t) { return t.width == s.width; });
    };
    if (s.width > 1 && std::all_of(blocks.begin(), blocks.end(), has)) widths.push_back(s.width);
  }
  std::sort(widths.begin(), widths.end());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
  return widths;
}

ModelProfile measure_profile(const json& spec, const ProfileOptions& options) {
  BRAID_CHECK(options.micro_batches.size() == 2, "profile: two micro-batch sizes are fitted, got ",
              options.micro_batches.size());
  std::vector<int64_t> sizes = options.micro_batches;
  std::sort(sizes.begin(), sizes.end());
  BRAID_CHECK(sizes[0] >= 1 && sizes[0] < sizes[1],
              "profile: the micro-batch sizes must be distinct "
              "and positive, got ",
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
    units.push_back(nn::PipelineUnit{
        module.get(), "model", 0, params.layout().size(), 0, params.buffers().size(), {}});

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

  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<Tensor> outputs;
    UnitProfile up = run_unit(*units[u].module, params, inputs, sizes, /*need_dx=*/u > 0,
                              options.repeats, rng, nullptr, &outputs);
    up.name = units[u].name;
    up.kind = std::string(units[u].module->kind());
    for (auto id = units[u].first; id < units[u].end; ++id)
      up.params += static_cast<double>(params.info(id).numel());
    const bool block = is_gpt && up.kind == "GptBlock";
    for (const int t : block ? options.tensor_widths : std::vector<int>{})
      if (t > 1 && gpt.heads % t == 0 && (gpt.mlp_ratio * gpt.d_model) % t == 0 &&
          gpt.vocab % t == 0)
        up.slices.push_back(measure_slice(gpt, t, inputs, sizes, options.repeats, rng));
    // The one block measured stands for h.0 .. h.(L-1).
    for (int64_t i = 0; i < (block ? gpt.layers : 1); ++i) {
      p.units.push_back(up);
      if (block) p.units.back().name = "h." + std::to_string(i);
    }
    inputs = std::move(outputs);
  }
  p.optimizer_s_per_param = measure_optimizer(options.repeats);
  if (options.codecs) p.codecs = measure_codecs();
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
  json codecs = json::array();
  for (const CodecProfile& c : p.codecs)
    codecs.push_back({{"name", c.name},
                      {"wire_ratio", c.wire_ratio},
                      {"seconds_per_float", c.seconds_per_float}});
  return {{"model", p.model},
          {"cpu", p.cpu},
          {"threads", p.threads},
          {"seq_len", p.seq_len},
          {"units", std::move(units)},
          {"optimizer_s_per_param", p.optimizer_s_per_param},
          {"sample_bytes", p.sample_bytes},
          {"codecs", codecs}};
}

ModelProfile parse_profile(const json& j, const std::string& where) {
  Reader r(j, where);
  ModelProfile p;
  p.model = r.get("model");
  p.cpu = r.text("cpu");
  p.threads = static_cast<int>(r.integer("threads"));
  p.seq_len = r.integer("seq_len");
  p.optimizer_s_per_param = r.number("optimizer_s_per_param");
  p.sample_bytes = r.number("sample_bytes");
  // Optional: profiles written before codecs were measured have none.
  if (r.has("codecs")) {
    const json& codecs = r.array("codecs");
    for (size_t i = 0; i < codecs.size(); ++i) {
      Reader rc(codecs[i], where + ".codecs[" + std::to_string(i) + "]");
      CodecProfile c;
      c.name = rc.text("name");
      c.wire_ratio = rc.number("wire_ratio");
      c.seconds_per_float = rc.number("seconds_per_float");
      rc.done();
      p.codecs.push_back(c);
    }
  }
  const json& units = r.array("units");
  r.done();
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string uw = where + ".units[" + std::to_string(i) + "]";
    Reader ru(units[i], uw);
    UnitProfile u;
    u.name = ru.text("name");
    u.kind = ru.text("kind");
    u.forward = ru.time("forward");
    u.backward = ru.time("backward");
    u.params = ru.number("params");
    u.activation_bytes_per_sample = ru.number("activation_bytes_per_sample");
    u.output_bytes_per_sample = ru.number("output_bytes_per_sample");
    const json& slices = ru.array("slices");
    ru.done();
    for (size_t k = 0; k < slices.size(); ++k) {
      Reader rs(slices[k], uw + ".slices[" + std::to_string(k) + "]");
      TensorSlice s;
      s.width = static_cast<int>(rs.integer("width"));
      s.forward = rs.time("forward");
      s.backward = rs.time("backward");
      s.params = rs.number("params");
      s.forward_sum_bytes_per_sample = rs.number("forward_sum_bytes_per_sample");
      s.backward_sum_bytes_per_sample = rs.number("backward_sum_bytes_per_sample");
      s.forward_sums = static_cast<int>(rs.integer("forward_sums"));
      s.backward_sums = static_cast<int>(rs.integer("backward_sums"));
      rs.done();
      u.slices.push_back(s);
    }
    p.units.push_back(std::move(u));
  }
  return p;
}

}  // namespace braid::plan
