// The graph format of a model spec: every validation error names the node (and its type
// and shapes), a graph written to match a chain with a residual block computes that
// chain's outputs and gradients bit for bit from the same weights, and its parameters are
// named "<node>.<param>".
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "nn/graph.h"
#include "nn/params.h"
#include "train/model_spec.h"

namespace braid::train {
namespace {

using nlohmann::json;

std::string error_of(const std::string& spec) {
  try {
    build_model(json::parse(spec));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_error(const std::string& spec, std::initializer_list<const char*> parts) {
  const std::string e = error_of(spec);
  for (const char* part : parts)
    EXPECT_NE(e.find(part), std::string::npos) << spec << " gave: '" << e << "'";
}

// A chain with a residual block (batch norm inside, so buffers too) and the graph that
// spells out the same computation.
const char* kChain = R"({"input": [6, 6, 2], "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"},
    {"type": "residual", "layers": [
       {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
       {"type": "batchnorm"}, {"type": "tanh"},
       {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}]},
    {"type": "relu"}, {"type": "flatten"}, {"type": "linear", "out_features": 5}]})";
const char* kGraph = R"({"input": [6, 6, 2], "nodes": [
    {"name": "stem", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"name": "a", "type": "relu"},
    {"name": "b1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"name": "bn", "type": "batchnorm"},
    {"name": "t", "type": "tanh"},
    {"name": "b2", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"name": "sum", "type": "add", "inputs": ["a", "b2"]},
    {"name": "r", "type": "relu"},
    {"name": "f", "type": "flatten"},
    {"name": "logits", "type": "linear", "out_features": 5}],
   "output": "logits"})";

struct Pass {
  std::vector<float> weights, out, grads, dx;
  std::vector<std::string> names;
};

// One forward and backward in train mode from the chain's initial weights (the graph's
// layout is the chain's, parameter for parameter, so the flat buffers copy across).
Pass run(const char* spec, const std::vector<float>* weights) {
  BuiltModel m = build_model(json::parse(spec));
  nn::ParamSet params;
  m.module->declare(params, "");
  params.allocate();
  Rng rng(5);
  m.module->init(rng);
  Pass r;
  if (weights) {
    EXPECT_EQ(static_cast<int64_t>(weights->size()), params.size());
    std::copy(weights->begin(), weights->end(), params.params());
  }
  for (const auto& p : params.layout()) r.names.push_back(p.name + p.shape.str());
  for (const auto& b : params.buffers()) r.names.push_back(b.name + b.value.shape().str());
  Rng data(11);
  Tensor x = Tensor::empty({3, 6, 6, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = data.normal();
  Tensor dy = Tensor::empty({3, 5});
  for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = data.normal();
  auto cache = m.module->make_cache();
  const Tensor& y = m.module->forward(x, *cache, nn::ForwardContext());
  r.out.assign(y.f32(), y.f32() + y.numel());
  params.zero_grads();
  const Tensor& dx = m.module->backward(dy, *cache, true);
  r.dx.assign(dx.f32(), dx.f32() + dx.numel());
  r.grads.assign(params.grads(), params.grads() + params.size());
  r.weights.assign(params.params(), params.params() + params.size());
  return r;
}

TEST(ModelGraph, GraphOfAChainWithAResidualBlockMatchesItBitForBit) {
  const Pass chain = run(kChain, nullptr);
  const Pass graph = run(kGraph, &chain.weights);
  ASSERT_EQ(graph.out.size(), chain.out.size());
  EXPECT_EQ(0, std::memcmp(graph.out.data(), chain.out.data(), sizeof(float) * chain.out.size()));
  ASSERT_EQ(graph.grads.size(), chain.grads.size());
  EXPECT_EQ(
      0, std::memcmp(graph.grads.data(), chain.grads.data(), sizeof(float) * chain.grads.size()));
  ASSERT_EQ(graph.dx.size(), chain.dx.size());
  EXPECT_EQ(0, std::memcmp(graph.dx.data(), chain.dx.data(), sizeof(float) * chain.dx.size()));
  EXPECT_EQ(graph.names,
            (std::vector<std::string>{
                "stem.weight[4, 2, 3, 3]", "stem.bias[4]", "b1.weight[4, 4, 3, 3]", "b1.bias[4]",
                "bn.weight[4]", "bn.bias[4]", "b2.weight[4, 4, 3, 3]", "b2.bias[4]",
                "logits.weight[5, 144]", "logits.bias[5]", "bn.running_mean[4]",
                "bn.running_var[4]", "bn.num_batches_tracked[]"}));
}

TEST(ModelGraph, DefaultsConcatAndAResidualNode) {
  BuiltModel m = build_model(json::parse(R"({"input": [8, 8, 3], "nodes": [
      {"name": "stem", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
      {"name": "block", "type": "residual", "layers": [{"type": "relu"},
          {"type": "conv2d", "out_channels": 4, "kernel": 1}]},
      {"name": "cat", "type": "concat", "inputs": ["block", "stem", "input"]},
      {"name": "wide", "type": "concat", "inputs": ["cat", "cat"], "axis": 1},
      {"name": "pool", "type": "global_avgpool"},
      {"name": "fc", "type": "linear", "out_features": 7}]})"));
  EXPECT_EQ(m.num_classes, 7);
  auto* g = dynamic_cast<nn::Graph*>(m.module.get());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->output(), 5);
  const std::vector<Shape> shapes = g->node_shapes({2, 8, 8, 3});
  EXPECT_EQ(shapes[2], Shape({2, 8, 8, 11}));
  EXPECT_EQ(shapes[3], Shape({2, 8, 16, 11}));
  nn::ParamSet params;
  m.module->declare(params, "");
  EXPECT_EQ(params.layout()[2].name, "block.body.1.weight");
}

TEST(ModelGraph, EveryValidationErrorNamesTheNode) {
  const std::string head = R"({"input": [4, 4, 2], "nodes": [)";
  const std::string conv =
      R"({"name": "c", "type": "conv2d", "out_channels": 3, "kernel": 3, "padding": 1})";
  const std::string tail = R"(, {"name": "f", "type": "flatten"},
      {"name": "fc", "type": "linear", "out_features": 2}]})";
  expect_error(head + conv + R"(, {"name": "r", "type": "relu", "inputs": ["cc"]})" + tail,
               {"node 'r' (relu) reads 'cc', which is no node", "did you mean 'c'?"});
  expect_error(head + conv + R"(, {"name": "c", "type": "relu"})" + tail,
               {"node 1: name 'c' is taken by an earlier node"});
  expect_error(head + R"({"name": "r", "type": "relu", "inputs": ["c"]}, )" + conv + tail,
               {"node 'r' (relu) reads 'c', which is not listed before it", "no cycles"});
  expect_error(head + conv + R"(, {"name": "r", "type": "relu", "inputs": ["r"]})" + tail,
               {"node 'r' (relu) reads 'r', which is not listed before it"});
  expect_error(head + conv + R"(, {"name": "r", "type": "relu"},
                  {"name": "f", "type": "flatten", "inputs": ["c"]},
                  {"name": "fc", "type": "linear", "out_features": 2}]})",
               {"node 'r' (relu) is not used: no node reads it and it is not the 'output' (fc)"});
  expect_error(head + conv + R"(, {"name": "s", "type": "add", "inputs": ["c", "input"]})" + tail,
               {"node 's' (add) adds inputs of one shape, got [1, 4, 4, 3], [1, 4, 4, 2]"});
  expect_error(head + conv +
                   R"(, {"name": "p", "type": "maxpool2d", "kernel": 2},
                  {"name": "k", "type": "concat", "inputs": ["c", "p"]})" +
                   tail,
               {"node 'k' (concat) joins inputs along sample axis 2, so they must agree on every "
                "other dimension; got [1, 4, 4, 3], [1, 2, 2, 3]"});
  expect_error(head + conv + R"(, {"name": "k", "type": "concat", "inputs": ["c", "input"],
                  "axis": 3})" +
                   tail,
               {"node 'k' (concat): 'axis' must be an integer in [-3, 2]"});
  expect_error(head + conv + R"(, {"name": "s", "type": "add", "inputs": ["c"]})" + tail,
               {"node 's' (add) needs at least 2 'inputs', got 1"});
  expect_error(head + conv + R"(, {"name": "r", "type": "relu", "inputs": ["c", "input"]})" + tail,
               {"node 'r' (relu) is a layer and reads one input, got 2"});
  expect_error(head + conv + R"(, {"name": "fc", "type": "linear", "out_features": 2}]})",
               {"model: node 'fc' (linear) expects input [batch, features] or [batch, time, "
                "features], got [1, 4, 4, 3] from node 'c' (conv2d)"});
  expect_error(
      head + conv + R"(, {"name": "k", "type": "add", "inputs": ["c", "c"], "axis": 1})" + tail,
      {"node 'k' (add): unknown key 'axis'"});
  expect_error(head + conv + R"(, {"name": "r", "type": "relu", "inplace": true})" + tail,
               {"node 'r' (relu): unknown key 'inplace'"});
  expect_error(head + R"({"name": "input", "type": "relu"})" + tail, {"node 0: name 'input'"});
  expect_error(head + R"({"name": "a.b", "type": "relu"})" + tail, {"node 0: name 'a.b'"});
  expect_error(head + R"({"type": "relu"})" + tail, {"node 0 must be an object with a string"});
  expect_error(head + conv + tail.substr(0, tail.size() - 1) + R"(, "output": "zz"})",
               {"'output' names 'zz', which is no node"});
  expect_error(head + conv + R"(]})", {"the output node, node 'c' (conv2d), outputs"});
  expect_error(R"({"input": [4], "layers": [], "nodes": []})", {"either 'layers'"});
  expect_error(R"({"input": [4], "nodes": [{"name": "a", "type": "relu"}], "bogus": 1})",
               {"unknown key 'bogus'; accepted: input, input_dtype, nodes, output"});
  expect_error(head + conv + R"(, {"name": "k", "type": "lstm"})" + tail,
               {"node 'k' (lstm): unknown layer type 'lstm'"});
}

}  // namespace
}  // namespace braid::train
