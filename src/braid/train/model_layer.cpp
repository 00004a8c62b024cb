// The layer types a model spec can name, each checked against its input shape and the
// memory budget before it is constructed.
#include "train/model_layer.h"

#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/host_memory.h"
#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/batchnorm.h"
#include "nn/conv2d.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/pad.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
#include "nn/softmax.h"
#include "nn/upsample.h"

namespace braid::train::spec {
namespace {

using nlohmann::json;

// Bytes a parameter costs in training: the weight, its gradient and up to two optimizer
// moments (Adam's m and v), fp32 each.
constexpr double kBytesPerParameter = 16;
// Where /proc/meminfo cannot be read.
constexpr double kAssumedMemory = 1024.0 * 1024 * 1024 * 1024;

double numel_of(const Shape& shape) {
  double n = 1;
  for (int i = 0; i < shape.rank(); ++i) n *= static_cast<double>(shape[i]);
  return n;
}

struct LayerReader {
  const json& j;
  std::string where;  // "layer 3 (conv2d)"
  std::set<std::string> seen{"type"};

  // An integer in [lo, hi]; an integral float (1e3) counts, 2.5 does not.
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t lo = 1,
                  int64_t hi = kMaxSize) {
    seen.insert(key);
    auto it = j.find(key);
    if (it == j.end()) {
      BRAID_CHECK(fallback.has_value(), "model: ", where, " needs '", key, "'");
      return *fallback;
    }
    const bool integral =
        it->is_number_integer() ||
        (it->is_number_float() && std::trunc(it->get<double>()) == it->get<double>());
    const double v = it->is_number() ? it->get<double>() : 0;
    BRAID_CHECK(integral && v >= static_cast<double>(lo) && v <= static_cast<double>(hi),
                "model: ", where, ": '", key, "' must be an integer in [", lo, ", ", hi, "], got ",
                it->dump());
    return static_cast<int64_t>(v);
  }
  double number(const char* key, double fallback) {
    seen.insert(key);
    auto it = j.find(key);
    if (it == j.end()) return fallback;
    BRAID_CHECK(it->is_number(), "model: ", where, ": '", key, "' must be a number");
    return it->get<double>();
  }
  bool flag(const char* key, bool fallback) {
    seen.insert(key);
    auto it = j.find(key);
    if (it == j.end()) return fallback;
    BRAID_CHECK(it->is_boolean(), "model: ", where, ": '", key, "' must be true or false");
    return it->get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) {
    seen.insert(key);
    auto it = j.find(key);
    if (it == j.end()) return fallback;
    BRAID_CHECK(it->is_string(), "model: ", where, ": '", key, "' must be a string");
    return it->get<std::string>();
  }
  void finish() const {
    for (auto it = j.begin(); it != j.end(); ++it)
      BRAID_CHECK(seen.count(it.key()), "model: ", where, ": unknown key '", it.key(), "'");
  }
};

void expect_rank(const std::string& where, const Budget& budget, const Shape& in,
                 std::initializer_list<int> ranks, const char* layout, const char* hint = "") {
  for (int r : ranks)
    if (in.rank() == r) return;
  BRAID_THROW(Error, "model: ", where, " expects input ", layout, ", got ", in.str(), " from ",
              budget.previous, hint);
}

// Refuses a layer whose parameters, with those before it, cannot fit in memory.
void add_parameters(const std::string& where, Budget& budget, double count,
                    const std::string& what) {
  budget.parameters += count;
  const double bytes = budget.parameters * kBytesPerParameter;
  BRAID_CHECK(bytes <= budget.limit_bytes, "model: ", where, " has ", count, " parameters (", what,
              "); with the layers before it the model needs about ", bytes / kGB,
              " GB for weights, gradients and optimizer state, more than the ",
              budget.limit_bytes / kGB,
              " GB this machine has available (MemAvailable in /proc/meminfo); make it smaller");
}

std::unique_ptr<nn::Module> make_layer(const std::string& type, LayerReader& r, const json& spec,
                                       const Shape& shape, Budget& budget) {
  const std::string& where = r.where;
  const char* kImage = "[batch, height, width, channels]";
  if (type == "linear") {
    expect_rank(where, budget, shape, {2, 3}, "[batch, features] or [batch, time, features]",
                shape.rank() > 3 ? "; add {\"type\": \"flatten\"} before it" : "");
    const int64_t in = r.integer("in_features", shape[-1]);
    const int64_t out = r.integer("out_features");
    const bool bias = r.flag("bias", true);
    add_parameters(where, budget, double(in) * double(out) + (bias ? double(out) : 0),
                   std::to_string(in) + " x " + std::to_string(out) + " weights");
    return std::make_unique<nn::Linear>(in, out, bias);
  }
  if (type == "conv2d") {
    expect_rank(where, budget, shape, {4}, kImage);
    const int64_t in = r.integer("in_channels", shape[-1]);
    const int64_t out = r.integer("out_channels");
    const int64_t k = r.integer("kernel");
    const int64_t stride = r.integer("stride", 1);
    const int64_t padding = r.integer("padding", 0, 0);
    const int64_t dilation = r.integer("dilation", 1);
    const int64_t groups = r.integer("groups", 1);
    const bool bias = r.flag("bias", true);
    BRAID_CHECK(in % groups == 0 && out % groups == 0, "model: ", where, ": 'groups' (", groups,
                ") must divide both in_channels (", in, ") and out_channels (", out,
                "); groups = in_channels is depthwise");
    // Checked here rather than by the layer's output_shape, to name dilation in the error.
    const int64_t span = dilation * (k - 1) + 1;
    BRAID_CHECK(dilation == 1 || (shape[1] + 2 * padding >= span && shape[2] + 2 * padding >= span),
                "model: ", where, ": the ", k, "x", k, " kernel dilated by ", dilation, " spans ",
                span, "x", span, ", more than the padded input ", shape[1] + 2 * padding, "x",
                shape[2] + 2 * padding, " (input ", shape.str(), " from ", budget.previous,
                "); use less dilation or more padding");
    const int64_t in_per_group = in / groups;
    add_parameters(where, budget,
                   double(in_per_group) * double(out) * double(k) * double(k) + (bias ? out : 0),
                   std::to_string(out) + " x " + std::to_string(in_per_group) + " x " +
                       std::to_string(k) + " x " + std::to_string(k) + " weights");
    return std::make_unique<nn::Conv2d>(in, out, k,
                                        nn::Conv2dOptions{.stride = stride,
                                                          .padding = padding,
                                                          .dilation = dilation,
                                                          .groups = groups,
                                                          .bias = bias});
  }
  if (type == "maxpool2d" || type == "avgpool2d") {
    expect_rank(where, budget, shape, {4}, kImage);
    const int64_t k = r.integer("kernel");
    if (type == "maxpool2d") return std::make_unique<nn::MaxPool2d>(k);
    return std::make_unique<nn::AvgPool2d>(k);
  }
  if (type == "upsample") {
    expect_rank(where, budget, shape, {4}, kImage);
    return std::make_unique<nn::Upsample>(r.integer("scale_factor"));
  }
  if (type == "global_avgpool") {
    expect_rank(where, budget, shape, {4}, kImage);
    return std::make_unique<nn::GlobalAvgPool>();
  }
  if (type == "batchnorm") {
    expect_rank(where, budget, shape, {2, 4},
                "[batch, features] or [batch, height, width, channels]");
    const int64_t c = r.integer("num_features", shape[-1]);
    add_parameters(where, budget, 4.0 * double(c), "scale, shift and running statistics");
    auto reducer = budget.options ? budget.options->batchnorm_reducer : nullptr;
    if (shape.rank() == 2) return std::make_unique<nn::BatchNorm1d>(c, std::move(reducer));
    return std::make_unique<nn::BatchNorm2d>(c, std::move(reducer));
  }
  if (type == "layernorm") {
    const int64_t n = r.integer("normalized_shape", shape[-1]);
    add_parameters(where, budget, 2.0 * double(n), "scale and shift");
    return std::make_unique<nn::LayerNorm>(n);
  }
  if (type == "relu") return std::make_unique<nn::ReLU>();
  if (type == "tanh") return std::make_unique<nn::Tanh>();
  if (type == "sigmoid") return std::make_unique<nn::Sigmoid>();
  if (type == "leaky_relu") {
    const double slope = r.number("negative_slope", 0.01);
    BRAID_CHECK(std::isfinite(slope) && slope >= 0, "model: ", where,
                ": 'negative_slope' must be a finite number >= 0, got ", slope,
                " (braid takes LeakyReLU's gradient from its output, which a negative slope "
                "makes ambiguous)");
    return std::make_unique<nn::LeakyReLU>(static_cast<float>(slope));
  }
  if (type == "silu") return std::make_unique<nn::SiLU>();
  if (type == "softmax") {
    // Over the last dimension. Not over an image's: braid's is channels (NHWC), PyTorch's
    // dim=-1 is width (NCHW), so the same spec would mean two different layers.
    expect_rank(where, budget, shape, {2, 3}, "[batch, features] or [batch, time, features]",
                shape.rank() == 4 ? "; softmax over an image's channels is not supported" : "");
    return std::make_unique<nn::Softmax>();
  }
  if (type == "gelu") {
    const std::string approx = r.text("approximate", "none");
    BRAID_CHECK(approx == "none" || approx == "tanh", "model: ", where,
                ": 'approximate' is 'none' or 'tanh', got '", approx, "'");
    return std::make_unique<nn::Gelu>(approx == "tanh" ? nn::GeluApprox::tanh
                                                       : nn::GeluApprox::none);
  }
  if (type == "dropout") {
    const double p = r.number("p", 0.5);
    BRAID_CHECK(p >= 0 && p < 1, "model: ", where, ": 'p' must be in [0, 1), got ", p);
    return std::make_unique<nn::Dropout>(static_cast<float>(p));
  }
  if (type == "flatten") return std::make_unique<nn::Flatten>();
  if (type == "embedding") {
    const int64_t n = r.integer("num_embeddings");
    const int64_t d = r.integer("embedding_dim");
    add_parameters(where, budget, double(n) * double(d),
                   std::to_string(n) + " x " + std::to_string(d) + " weights");
    return std::make_unique<nn::Embedding>(n, d);
  }
  if (type == "attention") {
    expect_rank(where, budget, shape, {3}, "[batch, time, features]");
    const double d = static_cast<double>(shape[-1]);
    add_parameters(where, budget, 4 * d * d + 4 * d, "q, k, v and output projections");
    return std::make_unique<nn::CausalSelfAttention>(shape[-1], r.integer("heads"));
  }
  if (type == "residual") {
    r.seen.insert("layers");
    r.seen.insert("shortcut");
    BRAID_CHECK(spec.contains("layers"), "model: ", where, " needs 'layers'");
    Shape inner = shape;
    const std::string previous = budget.previous;
    auto body = build_layers(spec["layers"], inner, where + " > ", budget);
    std::unique_ptr<nn::Sequential> shortcut;
    if (spec.contains("shortcut")) {
      Shape side = shape;
      budget.previous = previous;
      shortcut = build_layers(spec["shortcut"], side, where + " > shortcut > ", budget);
    }
    budget.previous = previous;
    return std::make_unique<nn::Residual>(std::move(body), std::move(shortcut));
  }
  if (type == "pad2d") {
    expect_rank(where, budget, shape, {4}, kImage);
    return std::make_unique<nn::ZeroPad2d>(r.integer("padding", 1, 0));
  }
  BRAID_THROW(Error, "model: ", where, ": unknown layer type '", type,
              "'; accepted: linear, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm, "
              "upsample, layernorm, relu, tanh, sigmoid, leaky_relu, silu, gelu, softmax, dropout, "
              "flatten, embedding, attention, pad2d, residual (with an optional shortcut)");
}

}  // namespace

double available_bytes() {
  const double available = static_cast<double>(mem_available_bytes().value_or(0));
  return available > 0 ? available : kAssumedMemory;
}

std::unique_ptr<nn::Module> build_layer(const json& spec, Shape& shape, const std::string& where0,
                                        Budget& budget) {
  BRAID_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(),
              "model: ", where0, " must be an object with a string 'type'");
  const std::string type = spec["type"];
  LayerReader r{spec, where0 + " (" + type + ")"};
  const std::string& where = r.where;
  std::unique_ptr<nn::Module> m;
  try {
    m = make_layer(type, r, spec, shape, budget);
    r.finish();
    shape = m->output_shape(shape);
  } catch (const Error& e) {
    // A layer's own check (a kernel larger than the image, heads that do not divide the
    // width) does not know where in the model it is.
    if (std::string_view(e.what()).starts_with("model: ")) throw;
    BRAID_THROW(Error, "model: ", where, " cannot take input ", shape.str(), " from ",
                budget.previous, ": ", e.what());
  }
  const double activations = numel_of(shape) * sizeof(float);
  BRAID_CHECK(activations <= budget.limit_bytes, "model: ", where, " outputs ", shape.str(),
              " per sample, ", activations / kGB, " GB, more than the ", budget.limit_bytes / kGB,
              " GB this machine has available; make it smaller");
  budget.previous = where;
  return m;
}

std::unique_ptr<nn::Sequential> build_layers(const json& layers, Shape& shape,
                                             const std::string& path, Budget& budget) {
  BRAID_CHECK(layers.is_array() && !layers.empty(), "model: '", path.empty() ? "layers" : path,
              "' must be a non-empty list of layers");
  std::vector<std::unique_ptr<nn::Module>> built;
  for (size_t i = 0; i < layers.size(); ++i)
    built.push_back(build_layer(layers[i], shape, path + "layer " + std::to_string(i), budget));
  // maxpool(relu(x)) == relu(maxpool(x)) exactly, gradients included (max and relu are
  // both monotone, ties go to the same element), and the second order runs the ReLU on a
  // tensor k*k times smaller. Neither layer has parameters, so state_dict names keep
  // their PyTorch numbering.
  for (size_t i = 0; i + 1 < built.size(); ++i)
    if (built[i]->kind() == "ReLU" && built[i + 1]->kind() == "MaxPool2d") {
      std::swap(built[i], built[i + 1]);
      ++i;
    }
  return std::make_unique<nn::Sequential>(std::move(built));
}

}  // namespace braid::train::spec
