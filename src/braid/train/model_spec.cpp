#include "train/model_spec.h"

#include <utility>

#include "core/error.h"
#include "nn/gpt.h"
#include "nn/sequential.h"
#include "train/model_graph.h"
#include "train/model_layer.h"
#include "train/recipes.h"
#include "train/suggest.h"

namespace braid::train {
namespace {

using nlohmann::json;
using spec::kGB;
using spec::kMaxSize;

std::string builtin_names() {
  std::string list;
  for (const std::string& n : builtin_model_names()) list += (list.empty() ? "" : ", ") + n;
  return list;
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
  if (name == "resnet18") {
    // He et al. 2016's ResNet-18 with the CIFAR stem (a 3x3 convolution, no max-pool) that
    // small images need, on Fashion-MNIST padded to 32 x 32; a strided block's shortcut is
    // a 1x1 convolution and batch norm (option B). As torchvision's BasicBlock: no
    // convolution bias (batch norm follows each), and the ReLU after the sum.
    auto conv3 = [](int out, int stride) {
      return json{{"type", "conv2d"}, {"out_channels", out}, {"kernel", 3},
                  {"stride", stride}, {"padding", 1},        {"bias", false}};
    };
    auto block = [&](int out, int stride) {
      json b = {{"type", "residual"},
                {"layers", {conv3(out, stride), bn, relu, conv3(out, 1), bn}}};
      if (stride != 1)
        b["shortcut"] = {{{"type", "conv2d"},
                          {"out_channels", out},
                          {"kernel", 1},
                          {"stride", stride},
                          {"bias", false}},
                         bn};
      return b;
    };
    json layers = {{{"type", "pad2d"}, {"padding", 2}}, conv3(64, 1), bn, relu};
    for (const auto& [channels, stride] : {std::pair{64, 1}, {128, 2}, {256, 2}, {512, 2}})
      for (const json& l : {block(channels, stride), relu, block(channels, 1), relu})
        layers.push_back(l);
    for (const json& l : {json{{"type", "global_avgpool"}}, linear(10)}) layers.push_back(l);
    return {{"input", image}, {"layers", layers}};
  }
  const std::string near = closest_match(name, builtin_model_names());
  BRAID_THROW(Error, "model: unknown built-in model '", name, "'; ",
              near.empty() ? "" : "did you mean '" + near + "'? ", "accepted: ", builtin_names(),
              " (or a spec object with 'input' and 'layers' or 'nodes')");
}

BuiltModel build_model(const json& spec, int64_t seq_len, const ModelBuildOptions& options) {
  BuiltModel out;
  if (spec.is_string() &&
      (spec.get<std::string>() == "gpt-tiny" || spec.get<std::string>() == "gpt-small")) {
    nn::GptConfig g;
    if (spec.get<std::string>() == "gpt-small") {
      // 25.4M parameters: where sharding and model parallelism start to matter here.
      g.d_model = 512;
      g.heads = 8;
      g.layers = 8;
    }
    BRAID_CHECK(seq_len > 0 && seq_len <= g.context, "model ", spec.get<std::string>(),
                ": seq_len ", seq_len, " must be in [1, ", g.context, "]");
    out.module = nn::make_gpt(g);
    out.sample_shape = Shape{seq_len};
    out.input_dtype = DType::i32;
    out.task = Task::language_model;
    out.num_classes = g.vocab;
    return out;
  }
  BRAID_CHECK(spec.is_string() || spec.is_object(), "model: a model is a built-in name (",
              builtin_names(), ") or an object with 'input' and 'layers' or 'nodes', got ",
              spec.type_name());
  const json s = spec.is_string() ? builtin_model_spec(spec.get<std::string>()) : spec;
  const bool graph = s.contains("nodes");
  BRAID_CHECK(s.contains("input") && (s.contains("layers") != graph),
              "model: a model spec is an object with 'input' (sample shape) and either 'layers' "
              "(a chain) or 'nodes' (a graph)");
  for (auto it = s.begin(); it != s.end(); ++it)
    BRAID_CHECK(it.key() == "input" || it.key() == "input_dtype" ||
                    it.key() == (graph ? "nodes" : "layers") || (graph && it.key() == "output"),
                "model: unknown key '", it.key(), "'; accepted: input, input_dtype, ",
                graph ? "nodes, output" : "layers");
  spec::Budget budget;
  budget.options = &options;
  budget.limit_bytes = spec::available_bytes();
  const json& input = s["input"];
  bool input_ok = input.is_array() && !input.empty() && input.size() <= 4;
  for (const json& d : input)
    input_ok =
        input_ok && d.is_number_integer() && d.get<int64_t>() >= 1 && d.get<int64_t>() <= kMaxSize;
  BRAID_CHECK(input_ok,
              "model: 'input' must be one sample's shape: a list of 1 to 4 integers in [1, ",
              kMaxSize, "] ([28, 28, 1] for an image, [128] for tokens), got ", input.dump());
  const auto dims = input.get<std::vector<int64_t>>();
  const std::string dtype = s.value("input_dtype", "f32");
  BRAID_CHECK(dtype == "f32" || dtype == "i32", "model: 'input_dtype' is f32 or i32, got '", dtype,
              "'");
  out.input_dtype = dtype == "i32" ? DType::i32 : DType::f32;
  std::vector<int64_t> with_batch{1};
  with_batch.insert(with_batch.end(), dims.begin(), dims.end());
  double sample = 1;
  for (int64_t d : dims) sample *= static_cast<double>(d);
  BRAID_CHECK(sample * sizeof(float) <= budget.limit_bytes, "model: one input sample ",
              input.dump(), " is ", sample * sizeof(float) / kGB, " GB, more than the ",
              budget.limit_bytes / kGB, " GB this machine has available");
  out.sample_shape = Shape(dims);
  Shape shape(with_batch);
  if (graph)
    out.module = spec::build_graph(s["nodes"], s.value("output", json()), shape, budget);
  else
    out.module = spec::build_layers(s["layers"], shape, "", budget);
  BRAID_CHECK(shape.rank() == 2 || shape.rank() == 3, "model: the ",
              graph ? "output node" : "last layer", ", ", budget.previous, ", outputs ",
              shape.str(),
              "; a model ends in [batch, classes] (a classifier: add {\"type\": \"flatten\"} "
              "before its linear layers) or [batch, time, classes] (a language model)");
  out.num_classes = shape[-1];
  out.task = shape.rank() == 3 ? Task::language_model : Task::classification;
  return out;
}

void check_model_spec(const json& spec, int64_t seq_len) { build_model(spec, seq_len); }

}  // namespace braid::train
