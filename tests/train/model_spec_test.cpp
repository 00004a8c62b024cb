#include "train/model_spec.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "nn/activations.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/params.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
#include "nn/softmax.h"
#include "nn/upsample.h"

namespace braid::train {
namespace {

using nlohmann::json;

std::vector<std::string> names_of(nn::Module& m) {
  nn::ParamSet params;
  m.declare(params, "");
  std::vector<std::string> out;
  for (const auto& p : params.layout()) out.push_back(p.name + p.shape.str());
  for (const auto& b : params.buffers()) out.push_back(b.name + b.value.shape().str());
  return out;
}

TEST(ModelSpec, CnnHasPyTorchSequentialNames) {
  BuiltModel m = build_model("cnn");
  EXPECT_EQ(m.sample_shape, Shape({28, 28, 1}));
  EXPECT_EQ(m.num_classes, 10);
  const std::vector<std::string> expected = {
      "0.weight[32, 1, 3, 3]", "0.bias[32]",  "3.weight[64, 32, 3, 3]", "3.bias[64]",
      "7.weight[128, 1600]",   "7.bias[128]", "9.weight[10, 128]",      "9.bias[10]"};
  EXPECT_EQ(names_of(*m.module), expected);
}

TEST(ModelSpec, MlpAndCnnBnNames) {
  BuiltModel mlp = build_model("mlp");
  EXPECT_EQ(names_of(*mlp.module)[0], "1.weight[1024, 784]");
  BuiltModel bn = build_model("cnn-bn");
  const auto names = names_of(*bn.module);
  EXPECT_NE(std::find(names.begin(), names.end(), "1.running_var[32]"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "5.num_batches_tracked[]"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "12.weight[10, 128]"), names.end());
}

TEST(ModelSpec, UserDefinedModelWithResidualBlock) {
  const json spec = json::parse(R"({
    "input": [16],
    "layers": [
      {"type": "linear", "out_features": 32}, {"type": "relu"},
      {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "linear", "out_features": 32},
                                      {"type": "gelu", "approximate": "tanh"}]},
      {"type": "linear", "out_features": 3}
    ]})");
  BuiltModel m = build_model(spec);
  EXPECT_EQ(m.num_classes, 3);
  const auto names = names_of(*m.module);
  EXPECT_EQ(names[2], "2.body.0.weight[32]");
  EXPECT_EQ(names[4], "2.body.1.weight[32, 32]");
}

// The built-in resnet18 is torchvision's CIFAR-style ResNet-18 for one input channel:
// 11,173,962 parameters with three input channels, less 2 x 64 x 9 of the stem.
TEST(ModelSpec, Resnet18HasTheParametersOfResNet18) {
  BuiltModel m = build_model("resnet18");
  EXPECT_EQ(m.num_classes, 10);
  nn::ParamSet params;
  m.module->declare(params, "");
  int64_t weights = 0;
  for (const auto& p : params.layout())
    if (p.name.find("running_") == std::string::npos) weights += p.shape.numel();
  EXPECT_EQ(weights, 11173962 - 2 * 64 * 9);
  const auto names = names_of(*m.module);
  EXPECT_NE(std::find(names.begin(), names.end(), "8.shortcut.0.weight[128, 64, 1, 1]"),
            names.end());
  EXPECT_EQ(m.module->output_shape(Shape{2, 28, 28, 1}), (Shape{2, 10}));
}

std::string error_of(const json& spec) {
  try {
    build_model(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelSpec, ShapeThatDoesNotFitNamesLayerAndShapes) {
  const std::string e = error_of(json::parse(R"({
    "input": [28, 28, 1],
    "layers": [{"type": "flatten"}, {"type": "conv2d", "out_channels": 4, "kernel": 3}]})"));
  EXPECT_NE(e.find("layer 1 (conv2d)"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 784]"), std::string::npos) << e;
  const std::string e2 = error_of(json::parse(R"({
    "input": [8], "layers": [{"type": "linear", "in_features": 9, "out_features": 2}]})"));
  EXPECT_NE(e2.find("layer 0 (linear)"), std::string::npos) << e2;
  EXPECT_NE(e2.find("[1, 8]"), std::string::npos) << e2;
}

TEST(ModelSpec, UnknownTypesAndKeysAreErrors) {
  EXPECT_NE(error_of(json::parse(R"({"input": [4], "layers": [{"type": "lstm"}]})"))
                .find("unknown layer type 'lstm'"),
            std::string::npos);
  EXPECT_NE(
      error_of(json::parse(R"({"input": [4], "layers": [{"type": "relu", "inplace": true}]})"))
          .find("unknown key 'inplace'"),
      std::string::npos);
  EXPECT_NE(error_of("resnet50").find("unknown built-in model 'resnet50'"), std::string::npos);
}

void expect_error(const std::string& spec, std::initializer_list<const char*> parts) {
  const std::string e = error_of(json::parse(spec));
  for (const char* part : parts)
    EXPECT_NE(e.find(part), std::string::npos) << spec << " gave: '" << e << "'";
}

// A conv2d straight into a linear used to be accepted (the linear ran over the channels
// of every pixel) and failed inside the loss without naming a layer.
TEST(ModelSpec, LinearAfterConvWithoutFlattenNamesTheLayerAndBothShapes) {
  expect_error(R"({"input": [28, 28, 1], "layers": [
                 {"type": "conv2d", "out_channels": 4, "kernel": 3}, {"type": "relu"},
                 {"type": "linear", "out_features": 10}]})",
               {"model: layer 2 (linear) expects input [batch, features] or [batch, time, "
                "features], got [1, 26, 26, 4] from layer 1 (relu)",
                "add {\"type\": \"flatten\"} before it"});
  expect_error(R"({"input": [28, 28, 1], "layers": [
                 {"type": "conv2d", "out_channels": 4, "kernel": 3}]})",
               {"the last layer, layer 0 (conv2d), outputs [1, 26, 26, 4]",
                "a model ends in [batch, classes]"});
  expect_error(R"({"input": [28, 28, 1], "layers": [
                 {"type": "conv2d", "out_channels": 4, "kernel": 29}]})",
               {"layer 0 (conv2d) cannot take input [1, 28, 28, 1] from the input"});
  expect_error(R"({"input": [48], "layers": [{"type": "attention", "heads": 3}]})",
               {"model: layer 0 (attention) expects input [batch, time, features], got [1, 48]"});
  // A layer's own check, placed: heads must divide the width.
  expect_error(R"({"input": [6, 8], "layers": [{"type": "attention", "heads": 3}]})",
               {"model: layer 0 (attention) cannot take input [1, 6, 8] from the input"});
  expect_error(R"({"input": [6, 8], "layers": [{"type": "residual", "layers": [
                 {"type": "linear", "out_features": 3}]}]})",
               {"layer 0 (residual)"});
}

// A depthwise-separable block (MobileNet's): a depthwise 3x3 (groups = channels, here with
// a channel multiplier of 2 and dilation 2) then a pointwise 1x1, with torch's names and
// weight shapes [out, in/groups, k, k].
TEST(ModelSpec, DepthwiseSeparableBlockHasTorchsShapesAndNames) {
  const json spec = json::parse(R"({
    "input": [16, 16, 8],
    "layers": [
      {"type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 2, "dilation": 2,
       "groups": 8, "bias": false},
      {"type": "batchnorm"}, {"type": "relu"},
      {"type": "conv2d", "out_channels": 32, "kernel": 1},
      {"type": "conv2d", "out_channels": 32, "kernel": 3, "stride": 2, "groups": 4},
      {"type": "global_avgpool"}, {"type": "linear", "out_features": 10}
    ]})");
  BuiltModel m = build_model(spec);
  const auto names = names_of(*m.module);
  const std::vector<std::string> expected = {"0.weight[16, 1, 3, 3]",
                                             "1.weight[16]",
                                             "1.bias[16]",
                                             "3.weight[32, 16, 1, 1]",
                                             "3.bias[32]",
                                             "4.weight[32, 8, 3, 3]",
                                             "4.bias[32]",
                                             "6.weight[10, 32]",
                                             "6.bias[10]"};
  ASSERT_GE(names.size(), expected.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 9), expected);
  const auto& conv = dynamic_cast<const nn::Conv2d&>(dynamic_cast<nn::Sequential&>(*m.module)[0]);
  EXPECT_EQ(conv.groups(), 8);
  EXPECT_EQ(conv.dilation(), 2);
  EXPECT_EQ(m.module->output_shape(Shape{2, 16, 16, 8}), (Shape{2, 10}));
}

TEST(ModelSpec, GroupsAndDilationThatDoNotFitAreRefused) {
  expect_error(R"({"input": [16, 16, 8], "layers": [
                 {"type": "conv2d", "out_channels": 12, "kernel": 3, "groups": 3}]})",
               {"model: layer 0 (conv2d): 'groups' (3) must divide both in_channels (8) and "
                "out_channels (12)"});
  expect_error(R"({"input": [16, 16, 8], "layers": [
                 {"type": "conv2d", "out_channels": 12, "kernel": 3, "groups": 8}]})",
               {"layer 0 (conv2d)", "must divide", "out_channels (12)"});
  expect_error(R"({"input": [16, 16, 8], "layers": [
                 {"type": "conv2d", "out_channels": 8, "kernel": 3, "groups": 0}]})",
               {"layer 0 (conv2d): 'groups' must be an integer in [1, "});
  expect_error(R"({"input": [16, 16, 8], "layers": [
                 {"type": "conv2d", "out_channels": 8, "kernel": 3, "dilation": 0}]})",
               {"layer 0 (conv2d): 'dilation' must be an integer in [1, "});
  expect_error(R"({"input": [16, 16, 8], "layers": [
                 {"type": "conv2d", "out_channels": 8, "kernel": 3, "dilation": 8,
                  "padding": 0}]})",
               {"model: layer 0 (conv2d): the 3x3 kernel dilated by 8 spans 17x17, more than "
                "the padded input 16x16",
                "use less dilation or more padding"});
}

// A linear with 1e11 outputs went to the allocator ("internal error", exit 70).
TEST(ModelSpec, SizesAreBoundedBeforeAnythingIsAllocated) {
  for (const char* out : {"100000000000", "1e11", "2.5", "0", "-3", "\"10\""})
    expect_error(
        std::string(R"({"input": [1600], "layers": [{"type": "linear", "out_features": )") + out +
            "}]}",
        {"model: layer 0 (linear): 'out_features' must be an integer in [1, 2147483647], "
         "got "});
  // Each size fits, the product does not fit any machine: 3.2e12 parameters, 51 TB.
  expect_error(R"({"input": [1600], "layers": [
                 {"type": "relu"}, {"type": "linear", "out_features": 2000000000}]})",
               {"model: layer 1 (linear) has 3.202e+12 parameters (1600 x 2000000000 weights)",
                "MemAvailable"});
  expect_error(R"({"input": [4], "input_dtype": "i32", "layers": [
                 {"type": "embedding", "num_embeddings": 2000000000, "embedding_dim": 100000}]})",
               {"layer 0 (embedding) has 2e+14 parameters"});
  expect_error(
      R"({"input": [2000000000, 2000000000, 2000000000], "layers": [{"type": "flatten"}]})",
      {"model: one input sample", "GB, more than the"});
  expect_error(R"({"input": [28, 0], "layers": [{"type": "flatten"}]})",
               {"model: 'input' must be one sample's shape"});
  // 4 TB of activations per sample.
  expect_error(R"({"input": [1000, 1000, 1], "layers": [
                 {"type": "conv2d", "out_channels": 1000000, "kernel": 1}]})",
               {"layer 0 (conv2d) outputs [1, 1000, 1000, 1000000] per sample"});
  expect_error(R"({"input": [4], "layers": [{"type": "dropout", "p": 1.5}]})",
               {"layer 0 (dropout): 'p' must be in [0, 1), got 1.5"});
  // An integral float is the integer it spells.
  EXPECT_EQ(build_model(json::parse(R"({"input": [4], "layers": [
              {"type": "linear", "out_features": 1e1}]})"))
                .num_classes,
            10);
}

}  // namespace
}  // namespace braid::train

namespace braid::train {
namespace {

// The builder runs ReLU after MaxPool2d (cheaper); outputs and gradients must equal the
// written order's bit for bit.
TEST(ModelSpec, ReluMaxPoolReorderIsExact) {
  const json spec = json::parse(R"({"input": [6, 6, 2], "layers": [
      {"type": "conv2d", "out_channels": 3, "kernel": 3, "padding": 1}, {"type": "relu"},
      {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}]})");
  BuiltModel built = build_model(spec);
  auto& seq = static_cast<nn::Sequential&>(*built.module);
  EXPECT_EQ(seq[1].kind(), "MaxPool2d");
  EXPECT_EQ(seq[2].kind(), "ReLU");
  std::vector<std::unique_ptr<nn::Module>> written;
  written.push_back(std::make_unique<nn::Conv2d>(2, 3, 3, 1, 1));
  written.push_back(std::make_unique<nn::ReLU>());
  written.push_back(std::make_unique<nn::MaxPool2d>(2));
  written.push_back(std::make_unique<nn::Flatten>());
  nn::Sequential reference(std::move(written));

  nn::ParamSet pa, pb;
  seq.declare(pa, "");
  reference.declare(pb, "");
  pa.allocate();
  pb.allocate();
  Rng ra(3), rb(3);
  seq.init(ra);
  reference.init(rb);
  Tensor x = Tensor::empty({2, 6, 6, 2});
  Rng rx(4);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rx.normal();
  auto ca = seq.make_cache(), cb = reference.make_cache();
  const Tensor& ya = seq.forward(x, *ca, {});
  const Tensor& yb = reference.forward(x, *cb, {});
  ASSERT_EQ(ya.shape(), yb.shape());
  EXPECT_EQ(std::memcmp(ya.raw(), yb.raw(), ya.nbytes()), 0);
  Tensor dy = Tensor::empty(ya.shape());
  for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = rx.normal();
  seq.backward(dy, *ca, true);
  reference.backward(dy, *cb, true);
  EXPECT_EQ(std::memcmp(pa.grads(), pb.grads(), pa.size() * sizeof(float)), 0);
}

// leaky_relu, silu, upsample and softmax: each builds its module with the spec's options,
// every shape follows (upsample doubles H and W), and a bad option or an input of the wrong
// rank is refused naming the layer.
TEST(ModelSpec, LeakyReluSiluUpsampleSoftmax) {
  const json spec = json::parse(R"({"input": [3, 4, 2], "layers": [
      {"type": "upsample", "scale_factor": 2}, {"type": "leaky_relu", "negative_slope": 0.2},
      {"type": "conv2d", "out_channels": 3, "kernel": 3}, {"type": "silu"},
      {"type": "flatten"}, {"type": "linear", "out_features": 5}, {"type": "leaky_relu"},
      {"type": "softmax"}]})");
  BuiltModel m = build_model(spec);
  EXPECT_EQ(m.num_classes, 5);
  auto& seq = static_cast<nn::Sequential&>(*m.module);
  ASSERT_EQ(seq.size(), 8u);
  EXPECT_EQ(seq[0].kind(), "Upsample");
  EXPECT_EQ(static_cast<nn::Upsample&>(seq[0]).scale_factor(), 2);
  EXPECT_EQ(seq[0].output_shape({7, 3, 4, 2}), Shape({7, 6, 8, 2}));
  EXPECT_EQ(seq[1].kind(), "LeakyReLU");
  EXPECT_FLOAT_EQ(static_cast<nn::LeakyReLU&>(seq[1]).negative_slope(), 0.2f);
  EXPECT_EQ(seq[3].kind(), "SiLU");
  EXPECT_FLOAT_EQ(static_cast<nn::LeakyReLU&>(seq[6]).negative_slope(), 0.01f);  // torch's
  EXPECT_EQ(seq[7].kind(), "Softmax");
  // The whole chain: conv 3x3 on the 6x8 upsampled image gives 4x6x3 = 72 features.
  EXPECT_EQ(m.module->output_shape({7, 3, 4, 2}), Shape({7, 5}));
  EXPECT_EQ(seq[4].output_shape({7, 4, 6, 3}), Shape({7, 72}));
  // Only parameters of conv2d (layer 2) and linear (layer 5), numbered as in PyTorch.
  const auto names = names_of(*m.module);
  EXPECT_EQ(names, (std::vector<std::string>{"2.weight[3, 2, 3, 3]", "2.bias[3]", "5.weight[5, 72]",
                                             "5.bias[5]"}));

  for (const char* bad : {"0", "-1", "1.5", "\"2\""})
    expect_error(std::string(R"({"input": [4, 4, 1], "layers": [
                   {"type": "upsample", "scale_factor": )") +
                     bad + R"(}, {"type": "flatten"}]})",
                 {"model: layer 0 (upsample): 'scale_factor' must be an integer in [1, "});
  expect_error(R"({"input": [4, 4, 1], "layers": [{"type": "upsample"}, {"type": "flatten"}]})",
               {"model: layer 0 (upsample) needs 'scale_factor'"});
  expect_error(R"({"input": [16], "layers": [{"type": "upsample", "scale_factor": 2}]})",
               {"model: layer 0 (upsample) expects input [batch, height, width, channels], got "
                "[1, 16]"});
  expect_error(R"({"input": [4], "layers": [{"type": "leaky_relu", "negative_slope": -0.1}]})",
               {"model: layer 0 (leaky_relu): 'negative_slope' must be a finite number >= 0, "
                "got -0.1"});
  expect_error(R"({"input": [4], "layers": [{"type": "leaky_relu", "negative_slope": "x"}]})",
               {"model: layer 0 (leaky_relu): 'negative_slope' must be a number"});
  expect_error(R"({"input": [4], "layers": [{"type": "silu", "beta": 2}]})",
               {"model: layer 0 (silu): unknown key 'beta'"});
  expect_error(R"({"input": [4, 4, 2], "layers": [{"type": "softmax"}, {"type": "flatten"}]})",
               {"model: layer 0 (softmax) expects input [batch, features] or [batch, time, "
                "features], got [1, 4, 4, 2]",
                "softmax over an image's channels is not supported"});
  // Slope 0 is accepted (it is ReLU).
  EXPECT_EQ(build_model(json::parse(R"({"input": [4], "layers": [
              {"type": "leaky_relu", "negative_slope": 0}]})"))
                .num_classes,
            4);
  const std::string unknown =
      error_of(json::parse(R"({"input": [4], "layers": [{"type": "swish"}]})"));
  for (const char* t : {"leaky_relu", "silu", "softmax", "upsample"})
    EXPECT_NE(unknown.find(t), std::string::npos) << unknown;
}

}  // namespace
}  // namespace braid::train
