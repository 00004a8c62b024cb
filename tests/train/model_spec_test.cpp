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

}  // namespace
}  // namespace braid::train
