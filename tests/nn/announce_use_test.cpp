// ParamSet::about_to_use: containers announce each child's parameters before its forward
// reads them. The proof is a forward whose parameters are all zero until announced: a
// listener copies each announced range in from the real values, and the output must be
// bitwise that of a forward with every parameter in place. A layer that read anything before
// its announcement would see zeros and change the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "nn/params.h"
#include "train/model_spec.h"

namespace braid::nn {
namespace {

Tensor random_batch(const train::BuiltModel& m, int64_t batch) {
  std::vector<int64_t> dims = m.sample_shape.to_vector();
  dims.insert(dims.begin(), batch);
  const Shape shape(dims);
  Rng rng(7);
  Tensor x = Tensor::empty(shape, m.input_dtype);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (m.input_dtype == DType::i32)
      x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(m.num_classes)));
    else
      x.f32()[i] = rng.normal();
  }
  return x;
}

void expect_forward_announces_every_parameter(const nlohmann::json& spec) {
  SCOPED_TRACE(spec.dump());
  train::BuiltModel m = train::build_model(spec, 16);
  ASSERT_TRUE(m.module->announces_use());
  ParamSet params;
  m.module->declare(params, "");
  params.allocate();
  Rng init(3);
  m.module->init(init);
  auto cache = m.module->make_cache();
  const Tensor x = random_batch(m, 4);
  const ForwardContext ctx;
  const Tensor& first = m.module->forward(x, *cache, ctx);
  Tensor expected = Tensor::empty(first.shape());
  expected.copy_from(first);

  const std::vector<float> real(params.params(), params.params() + params.size());
  std::fill(params.params(), params.params() + params.size(), 0.0f);
  std::vector<uint8_t> announced(real.size(), 0);
  params.set_use_listener([&](int64_t begin, int64_t end) {
    ASSERT_LE(0, begin);
    ASSERT_LE(end, params.size());
    std::copy(real.begin() + begin, real.begin() + end, params.params() + begin);
    std::fill(announced.begin() + begin, announced.begin() + end, uint8_t{1});
  });
  const Tensor& got = m.module->forward(x, *cache, ctx);
  params.set_use_listener(nullptr);

  ASSERT_EQ(got.shape(), expected.shape());
  EXPECT_EQ(0, std::memcmp(got.f32(), expected.f32(), sizeof(float) * got.numel()));
  for (const ParamInfo& p : params.layout())
    EXPECT_TRUE(std::all_of(announced.begin() + p.offset, announced.begin() + p.offset + p.numel(),
                            [](uint8_t a) { return a != 0; }))
        << p.name << " was never announced";
}

TEST(AnnounceUse, SequentialModelsAnnounceEachLayerBeforeItsForward) {
  for (const char* name : {"mlp", "cnn", "cnn-bn"})
    expect_forward_announces_every_parameter(train::builtin_model_spec(name));
}

TEST(AnnounceUse, ResidualBlocksAnnounceTheirBody) {
  expect_forward_announces_every_parameter(nlohmann::json::parse(R"({
    "input": [12],
    "layers": [{"type": "linear", "out_features": 16},
               {"type": "residual", "layers": [{"type": "layernorm"},
                                               {"type": "linear", "out_features": 16},
                                               {"type": "relu"}]},
               {"type": "linear", "out_features": 5}]})"));
}

TEST(AnnounceUse, GraphNodesAnnounceTheirParameters) {
  expect_forward_announces_every_parameter(nlohmann::json::parse(R"({
    "input": [12],
    "nodes": [{"name": "a", "type": "linear", "out_features": 16},
              {"name": "b", "type": "linear", "out_features": 16},
              {"name": "c", "type": "linear", "out_features": 16, "inputs": ["input"]},
              {"name": "sum", "type": "add", "inputs": ["a", "b", "c"]},
              {"name": "cat", "type": "concat", "inputs": ["sum", "input"]},
              {"name": "out", "type": "linear", "out_features": 5}]})"));
}

TEST(AnnounceUse, GptAnnouncesEmbeddingsBlocksAndFinalNorm) {
  expect_forward_announces_every_parameter("gpt-tiny");
}

}  // namespace
}  // namespace braid::nn
