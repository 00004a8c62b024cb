#include "train/model_spec.h"

#include <set>

#include "core/error.h"
#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/batchnorm.h"
#include "nn/conv2d.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/gelu.h"
#include "nn/gpt.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/pooling.h"
#include "nn/sequential.h"

namespace braid::train {
namespace {

using nlohmann::json;

struct LayerReader {
  const json& j;
  std::string where;  // "layer 3 (conv2d)"
  std::set<std::string> seen{"type"};

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) {
    seen.insert(key);
    auto it = j.find(key);
    if (it == j.end()) {
      BRAID_CHECK(fallback.has_value(), "model: ", where, " needs '", key, "'");
      return *fallback;
    }
    BRAID_CHECK(it->is_number_integer(), "model: ", where, ": '", key, "' must be an integer");
    return it->get<int64_t>();
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

void expect_rank(const std::string& where, const Shape& in, int rank, const char* layout) {
  BRAID_CHECK(in.rank() == rank, "model: ", where, " expects input ", layout, ", got ", in.str());
}

std::unique_ptr<nn::Sequential> build_layers(const json& layers, Shape& shape,
                                             const std::string& path);

std::unique_ptr<nn::Module> build_layer(const json& spec, Shape& shape, const std::string& where0) {
  BRAID_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(),
              "model: ", where0, " must be an object with a string 'type'");
  const std::string type = spec["type"];
  LayerReader r{spec, where0 + " (" + type + ")"};
  const std::string& where = r.where;
  std::unique_ptr<nn::Module> m;
  if (type == "linear") {
    BRAID_CHECK(shape.rank() >= 2, "model: ", where, " expects input [batch, ..., features], got ",
                shape.str());
    const int64_t in = r.integer("in_features", shape[-1]);
    m = std::make_unique<nn::Linear>(in, r.integer("out_features"), r.flag("bias", true));
  } else if (type == "conv2d") {
    expect_rank(where, shape, 4, "[batch, height, width, channels]");
    const int64_t in = r.integer("in_channels", shape[-1]);
    m = std::make_unique<nn::Conv2d>(in, r.integer("out_channels"), r.integer("kernel"),
                                     r.integer("stride", 1), r.integer("padding", 0),
                                     r.flag("bias", true));
  } else if (type == "maxpool2d" || type == "avgpool2d") {
    expect_rank(where, shape, 4, "[batch, height, width, channels]");
    const int64_t k = r.integer("kernel");
    if (type == "maxpool2d")
      m = std::make_unique<nn::MaxPool2d>(k);
    else
      m = std::make_unique<nn::AvgPool2d>(k);
  } else if (type == "global_avgpool") {
    expect_rank(where, shape, 4, "[batch, height, width, channels]");
    m = std::make_unique<nn::GlobalAvgPool>();
  } else if (type == "batchnorm") {
    BRAID_CHECK(shape.rank() == 2 || shape.rank() == 4, "model: ", where,
                " expects [batch, features] or [batch, height, width, channels], got ",
                shape.str());
    const int64_t c = r.integer("num_features", shape[-1]);
    if (shape.rank() == 2)
      m = std::make_unique<nn::BatchNorm1d>(c);
    else
      m = std::make_unique<nn::BatchNorm2d>(c);
  } else if (type == "layernorm") {
    m = std::make_unique<nn::LayerNorm>(r.integer("normalized_shape", shape[-1]));
  } else if (type == "relu") {
    m = std::make_unique<nn::ReLU>();
  } else if (type == "tanh") {
    m = std::make_unique<nn::Tanh>();
  } else if (type == "sigmoid") {
    m = std::make_unique<nn::Sigmoid>();
  } else if (type == "gelu") {
    const std::string approx = r.text("approximate", "none");
    BRAID_CHECK(approx == "none" || approx == "tanh", "model: ", where,
                ": 'approximate' is 'none' or 'tanh', got '", approx, "'");
    m = std::make_unique<nn::Gelu>(approx == "tanh" ? nn::GeluApprox::tanh : nn::GeluApprox::none);
  } else if (type == "dropout") {
    m = std::make_unique<nn::Dropout>(static_cast<float>(r.number("p", 0.5)));
  } else if (type == "flatten") {
    m = std::make_unique<nn::Flatten>();
  } else if (type == "embedding") {
    m = std::make_unique<nn::Embedding>(r.integer("num_embeddings"), r.integer("embedding_dim"));
  } else if (type == "attention") {
    BRAID_CHECK(shape.rank() == 3, "model: ", where, " expects [batch, time, features], got ",
                shape.str());
    m = std::make_unique<nn::CausalSelfAttention>(shape[-1], r.integer("heads"));
  } else if (type == "residual") {
    r.seen.insert("layers");
    BRAID_CHECK(spec.contains("layers"), "model: ", where, " needs 'layers'");
    Shape inner = shape;
    m = std::make_unique<nn::Residual>(build_layers(spec["layers"], inner, where + " > "));
  } else {
    BRAID_THROW(Error, "model: ", where0, ": unknown layer type '", type,
                "'; accepted: linear, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm, "
                "layernorm, relu, tanh, sigmoid, gelu, dropout, flatten, embedding, attention, "
                "residual");
  }
  r.finish();
  try {
    shape = m->output_shape(shape);
  } catch (const Error& e) {
    BRAID_THROW(Error, "model: ", where, ": ", e.what());
  }
  return m;
}

std::unique_ptr<nn::Sequential> build_layers(const json& layers, Shape& shape,
                                             const std::string& path) {
  BRAID_CHECK(layers.is_array() && !layers.empty(), "model: '", path.empty() ? "layers" : path,
              "' must be a non-empty list of layers");
  std::vector<std::unique_ptr<nn::Module>> built;
  for (size_t i = 0; i < layers.size(); ++i)
    built.push_back(build_layer(layers[i], shape, path + "layer " + std::to_string(i)));
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

}  // namespace

json builtin_model_spec(const std::string& name) {
  const json relu = {{"type", "relu"}};
  const json flatten = {{"type", "flatten"}};
  const json pool = {{"type", "maxpool2d"}, {"kernel", 2}};
  auto conv = [](int out) {
    return json{{"type", "conv2d"}, {"out_channels", out}, {"kernel", 3}};
  };
  auto linear = [](int out) { return json{{"type", "linear"}, {"out_features", out}}; };
  const json bn = {{"type", "batchnorm"}};
  const json image = {28, 28, 1};
  if (name == "mlp")
    return {{"input", image},
            {"layers", {flatten, linear(1024), relu, linear(1024), relu, linear(10)}}};
  if (name == "cnn")
    return {{"input", image},
            {"layers",
             {conv(32), relu, pool, conv(64), relu, pool, flatten, linear(128), relu, linear(10)}}};
  if (name == "cnn-bn")
    return {{"input", image},
            {"layers",
             {conv(32),
              bn,
              relu,
              pool,
              conv(64),
              bn,
              relu,
              pool,
              flatten,
              linear(128),
              relu,
              {{"type", "dropout"}, {"p", 0.25}},
              linear(10)}}};
  BRAID_THROW(Error, "model: unknown built-in model '", name,
              "'; accepted: mlp, cnn, cnn-bn, gpt-tiny (or a spec object with 'input' and "
              "'layers')");
}

BuiltModel build_model(const json& spec, int64_t seq_len) {
  BuiltModel out;
  if (spec.is_string() && spec.get<std::string>() == "gpt-tiny") {
    nn::GptConfig g;
    BRAID_CHECK(seq_len > 0 && seq_len <= g.context, "model gpt-tiny: seq_len ", seq_len,
                " must be in [1, ", g.context, "]");
    out.module = nn::make_gpt(g);
    out.sample_shape = Shape{seq_len};
    out.input_dtype = DType::i32;
    out.task = Task::language_model;
    out.num_classes = g.vocab;
    return out;
  }
  const json s = spec.is_string() ? builtin_model_spec(spec.get<std::string>()) : spec;
  BRAID_CHECK(s.is_object() && s.contains("input") && s.contains("layers"),
              "model: a model spec is an object with 'input' (sample shape) and 'layers'");
  for (auto it = s.begin(); it != s.end(); ++it)
    BRAID_CHECK(it.key() == "input" || it.key() == "layers" || it.key() == "input_dtype",
                "model: unknown key '", it.key(), "'; accepted: input, input_dtype, layers");
  std::vector<int64_t> dims;
  try {
    dims = s["input"].get<std::vector<int64_t>>();
  } catch (const json::exception&) {
    BRAID_THROW(Error, "model: 'input' must be a list of positive integers (one sample's shape)");
  }
  const std::string dtype = s.value("input_dtype", "f32");
  BRAID_CHECK(dtype == "f32" || dtype == "i32", "model: 'input_dtype' is f32 or i32, got '", dtype,
              "'");
  out.input_dtype = dtype == "i32" ? DType::i32 : DType::f32;
  out.sample_shape = Shape(dims);
  std::vector<int64_t> with_batch{1};
  with_batch.insert(with_batch.end(), dims.begin(), dims.end());
  Shape shape(with_batch);
  out.module = build_layers(s["layers"], shape, "");
  BRAID_CHECK(shape.rank() >= 2, "model: the last layer's output ", shape.str(),
              " must be [batch, classes] or [batch, time, classes]");
  out.num_classes = shape[-1];
  out.task = shape.rank() == 3 ? Task::language_model : Task::classification;
  return out;
}

}  // namespace braid::train
