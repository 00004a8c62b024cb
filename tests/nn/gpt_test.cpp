#include "nn/gpt.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "gradcheck.h"

namespace braid::nn {
namespace {

// Default-initialised: `{}` would copy-list-initialise Rng through its explicit constructor.
const ForwardContext kCtx;

using testing::expect_gradients_match;
using testing::GradCheckOptions;
using testing::random_input;

GptConfig tiny_test_config() {
  GptConfig c;
  c.vocab = 11;
  c.context = 6;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  return c;
}

Tensor random_tokens(const Shape& shape, int64_t vocab, uint64_t seed = 1) {
  Rng rng(seed);
  Tensor t = Tensor::empty(shape, DType::i32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return t;
}

TEST(GptBlock, GradientsMatchFiniteDifferences) {
  GptBlock block(8, 2, 4);
  GradCheckOptions opt;
  opt.max_checks = 24;
  expect_gradients_match(block, random_input({2, 5, 8}), opt);
}

TEST(Gpt, GradientsMatchFiniteDifferences) {
  Gpt model(tiny_test_config());
  GradCheckOptions opt;
  opt.check_input = false;
  opt.max_checks = 12;
  expect_gradients_match(model, random_tokens({2, 6}, 11), opt);
}

struct Built {
  std::unique_ptr<Module> model;
  ParamSet params;
};

void build(Built& b, const GptConfig& config, uint64_t seed = 1) {
  b.model = make_gpt(config);
  b.model->declare(b.params, "");
  b.params.allocate();
  Rng rng(seed);
  b.model->init(rng);
}

TEST(Gpt, LaterTokensDoNotChangeEarlierLogits) {
  GptConfig config = tiny_test_config();
  config.context = 40;
  Built b;
  build(b, config);
  const int64_t T = 40, V = config.vocab;
  Tensor x1 = random_tokens({2, T}, V, 3);
  Tensor x2 = random_tokens({2, T}, V, 3);
  const int64_t cut = 17;
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t t = cut + 1; t < T; ++t) {
      int32_t& v = x2.data<int32_t>()[bi * T + t];
      v = static_cast<int32_t>((v + 1 + t) % V);
    }
  auto c1 = b.model->make_cache();
  auto c2 = b.model->make_cache();
  const Tensor& y1 = b.model->forward(x1, *c1, kCtx);
  const Tensor& y2 = b.model->forward(x2, *c2, kCtx);
  double later = 0;
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < V; ++v) {
        const int64_t i = (bi * T + t) * V + v;
        if (t <= cut)
          ASSERT_EQ(y1.f32()[i], y2.f32()[i]) << "b=" << bi << " t=" << t;
        else
          later += std::fabs(y1.f32()[i] - y2.f32()[i]);
      }
  EXPECT_GT(later, 1e-4);
}

TEST(Gpt, TinyParameterNamesShapesAndInit) {
  const GptConfig config;  // gpt-tiny
  Built b;
  build(b, config);
  const int64_t V = 256, C = 128, D = 128;
  std::vector<std::pair<std::string, Shape>> expected = {{"wte.weight", {V, D}},
                                                         {"wpe.weight", {C, D}}};
  for (int i = 0; i < 4; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    const std::vector<std::pair<std::string, Shape>> block = {
        {h + "ln_1.weight", {D}},
        {h + "ln_1.bias", {D}},
        {h + "attn.c_attn.weight", {3 * D, D}},
        {h + "attn.c_attn.bias", {3 * D}},
        {h + "attn.c_proj.weight", {D, D}},
        {h + "attn.c_proj.bias", {D}},
        {h + "ln_2.weight", {D}},
        {h + "ln_2.bias", {D}},
        {h + "mlp.c_fc.weight", {4 * D, D}},
        {h + "mlp.c_fc.bias", {4 * D}},
        {h + "mlp.c_proj.weight", {D, 4 * D}},
        {h + "mlp.c_proj.bias", {D}}};
    expected.insert(expected.end(), block.begin(), block.end());
  }
  expected.push_back({"ln_f.weight", {D}});
  expected.push_back({"ln_f.bias", {D}});
  const auto& layout = b.params.layout();
  ASSERT_EQ(layout.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(layout[i].name, expected[i].first);
    EXPECT_EQ(layout[i].shape, expected[i].second) << layout[i].name;
    EXPECT_EQ(layout[i].decay, layout[i].shape.rank() == 2) << layout[i].name;
  }
  const int64_t count = b.params.count();
  std::printf("gpt-tiny parameters: %lld\n", static_cast<long long>(count));
  EXPECT_EQ(count, V * D + C * D + 4 * (12 * D * D + 13 * D) + 2 * D);

  auto stddev = [&](const std::string& name) {
    const Tensor w = b.params.param(b.params.find(name));
    double s = 0;
    for (int64_t i = 0; i < w.numel(); ++i) s += double(w.f32()[i]) * w.f32()[i];
    return std::sqrt(s / double(w.numel()));
  };
  EXPECT_NEAR(stddev("wte.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("wpe.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("h.1.mlp.c_fc.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("h.1.attn.c_proj.weight"), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_NEAR(stddev("h.3.mlp.c_proj.weight"), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_EQ(stddev("h.2.attn.c_attn.bias"), 0.0);
  EXPECT_EQ(b.params.param(b.params.find("ln_f.weight")).f32()[5], 1.0f);
  EXPECT_EQ(stddev("h.0.ln_1.bias"), 0.0);

  const Shape in{32, 128};
  EXPECT_EQ(b.model->output_shape(in), Shape({32, 128, 256}));
  // 2 x tokens x (matmul parameters incl. the tied head) + dense attention 4 B T^2 D per layer.
  const double tokens = 32.0 * 128, matmul_params = 4 * 12.0 * D * D + V * D;
  EXPECT_DOUBLE_EQ(b.model->forward_flops(in),
                   2 * tokens * matmul_params + 4 * 4.0 * 32 * 128 * 128 * D);
}

TEST(Gpt, SteadyStateStepAllocatesNothing) {
  Built b;
  build(b, tiny_test_config());
  Tensor x = random_tokens({3, 6}, 11);
  Tensor dy = random_input({3, 6, 11});
  auto cache = b.model->make_cache();
  b.model->forward(x, *cache, kCtx);
  b.model->backward(dy, *cache, false);
  const int64_t before = MemoryTracker::process().allocations();
  for (int i = 0; i < 2; ++i) {
    b.model->forward(x, *cache, kCtx);
    b.model->backward(dy, *cache, false);
  }
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
}

TEST(Gpt, ErrorsNameTheProblem) {
  Built b;
  build(b, tiny_test_config());
  auto cache = b.model->make_cache();
  try {
    b.model->forward(random_tokens({1, 7}, 11), *cache, kCtx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context of 6"), std::string::npos) << e.what();
  }
  Tensor bad = random_tokens({2, 3}, 11);
  bad.data<int32_t>()[4] = 11;
  try {
    b.model->forward(bad, *cache, kCtx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 11 at position 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.model->forward(random_input({2, 3}), *cache, kCtx), Error);
  b.model->forward(random_tokens({2, 3}, 11), *cache, kCtx);
  EXPECT_THROW(b.model->backward(random_input({2, 3, 11}), *cache, true), Error);
  try {
    Gpt odd(GptConfig{11, 6, 9, 2, 1, 4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Gpt(GptConfig{11, 6, 8, 2, 0, 4}), Error);
}

}  // namespace
}  // namespace braid::nn
