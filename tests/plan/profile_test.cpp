#include "plan/profile.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "nn/params.h"
#include "train/model_spec.h"

namespace braid::plan {
namespace {

using nlohmann::json;

// A fast profile: the tests check counts and shapes exactly and times only by sign and
// order, so one repeat at small sizes is enough.
ProfileOptions quick(int64_t seq_len = 16, std::vector<int> widths = {}) {
  ProfileOptions o;
  o.seq_len = seq_len;
  o.micro_batches = {1, 2};
  o.repeats = 1;
  o.tensor_widths = std::move(widths);
  return o;
}

double real_params(const json& spec) {
  train::BuiltModel built = train::build_model(spec, 16);
  nn::ParamSet params;
  built.module->declare(params, "");
  return static_cast<double>(params.count());
}

TensorSlice slice(int width) {
  TensorSlice s;
  s.width = width;
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const json kChain = {{"input", {32}},
                     {"layers",
                      {{{"type", "linear"}, {"out_features", 64}},
                       {{"type", "relu"}},
                       {{"type", "linear"}, {"out_features", 10}}}}};

TEST(Profile, MlpUnitsSumToTheModelsParameters) {
  const ModelProfile p = measure_profile("mlp", quick());
  EXPECT_EQ(p.params(), real_params("mlp"));
  EXPECT_TRUE(p.cuttable());
  EXPECT_EQ(p.seq_len, 0);
  EXPECT_EQ(p.sample_bytes, 28 * 28 * 4);
}

// One block is measured and stands for eight; the head's tied wte is the embedding's.
TEST(Profile, GptSmallUnitsSumToTheRealGptSmall) {
  const ModelProfile p = measure_profile("gpt-small", quick());
  EXPECT_EQ(p.params(), real_params("gpt-small"));
  ASSERT_EQ(p.units.size(), 10u);
  EXPECT_EQ(p.units.front().name, "embedding");
  EXPECT_EQ(p.units[1].name, "h.0");
  EXPECT_EQ(p.units[8].name, "h.7");
  EXPECT_EQ(p.units[8].kind, "GptBlock");
  EXPECT_EQ(p.units.back().name, "head");
  EXPECT_EQ(p.seq_len, 16);
  EXPECT_EQ(p.sample_bytes, 16 * 4);  // i32 token ids
  // ln_f only: the head's weight is the embedding's.
  EXPECT_EQ(p.units.back().params, 2 * 512);
}

// A graph cannot be cut: the whole model is one unit, and the profile says so.
TEST(Profile, AModelThatCannotBeCutIsOneUnit) {
  const json graph = {
      {"input", {8}},
      {"nodes",
       {{{"name", "a"}, {"type", "linear"}, {"out_features", 16}},
        {{"name", "b"}, {"type", "linear"}, {"out_features", 16}, {"inputs", {"a"}}},
        {{"name", "sum"}, {"type", "add"}, {"inputs", {"a", "b"}}}}}};
  const ModelProfile p = measure_profile(graph, quick());
  ASSERT_EQ(p.units.size(), 1u);
  EXPECT_EQ(p.units[0].name, "model");
  EXPECT_FALSE(p.cuttable());
  EXPECT_EQ(p.params(), real_params(graph));
  EXPECT_EQ(p.params(), 8 * 16 + 16 + 16 * 16 + 16);
  EXPECT_EQ(p.units[0].output_bytes_per_sample, 16 * 4);
}

TEST(Profile, OutputBytesAreTheOutputAndActivationsHoldWhatForwardAllocated) {
  const ModelProfile p = measure_profile(kChain, quick());
  ASSERT_EQ(p.units.size(), 3u);
  EXPECT_EQ(p.units[0].output_bytes_per_sample, 64 * 4);
  EXPECT_EQ(p.units[1].output_bytes_per_sample, 64 * 4);
  EXPECT_EQ(p.units[2].output_bytes_per_sample, 10 * 4);
  // A Linear keeps its input by reference (the layer before allocated it and counts it as
  // its output) and allocates its output, which the next layer's backward reads.
  EXPECT_GE(p.units[0].activation_bytes_per_sample, 64 * 4);
  EXPECT_GE(p.units[2].activation_bytes_per_sample, 10 * 4);
  EXPECT_EQ(p.units[0].params, 32 * 64 + 64);
  EXPECT_EQ(p.units[1].params, 0);
  EXPECT_EQ(p.sample_bytes, 32 * 4);
}

TEST(Profile, TensorSlicesCountTheSumsTpGptBlockMakes) {
  const int64_t D = 64, T = 16;
  const ModelProfile p =
      measure_profile("gpt:d_model=64,layers=2,heads=4,context=16", quick(T, {2, 3, 4}));
  ASSERT_EQ(p.units.size(), 4u);
  for (const char* name : {"h.0", "h.1"}) {
    const UnitProfile& u = p.units[name == std::string("h.0") ? 1 : 2];
    ASSERT_EQ(u.name, name);
    ASSERT_EQ(u.slices.size(), 2u) << "3 divides none of heads 4, 4D 256, vocab 256";
    EXPECT_EQ(u.slices[0].width, 2);
    EXPECT_EQ(u.slices[1].width, 4);
    for (const TensorSlice& s : u.slices) {
      // Forward: the attention's and the MLP's row-parallel outputs, [T, D] a sample each.
      EXPECT_EQ(s.forward_sums, 2);
      EXPECT_EQ(s.forward_sum_bytes_per_sample, 2 * T * D * 4);
      // Backward: dL/d ln_2(x) and dL/d ln_1(x), the column-parallel inputs' gradients.
      EXPECT_EQ(s.backward_sums, 2);
      EXPECT_EQ(s.backward_sum_bytes_per_sample, 2 * T * D * 4);
      EXPECT_GT(s.forward.at(2), 0);
      EXPECT_GT(s.backward.at(2), 0);
    }
    // Width 2: c_attn 64 x 96 + 96, attn c_proj 32 x 64 (its bias apart), c_fc 64 x 128 +
    // 128, mlp c_proj 128 x 64; replicated: two LayerNorms (2 x 128) and two biases (2 x 64).
    EXPECT_EQ(u.slices[0].params, 6240 + 2048 + 8320 + 8192 + 256 + 128);
    // Width 4: c_attn 64 x 48 + 48, 16 x 64, c_fc 64 x 64 + 64, 64 x 64, and the same 384.
    EXPECT_EQ(u.slices[1].params, 3120 + 1024 + 4160 + 4096 + 384);
    // The whole block: 49984; the slice holds half the cut matrices and all of the rest.
    EXPECT_EQ(u.params, 49984);
  }
  EXPECT_EQ(p.tensor_widths(), (std::vector<int>{1, 2, 4}));
}

TEST(Profile, TensorWidthsAreThoseEveryBlockWasMeasuredAt) {
  ModelProfile p;
  EXPECT_EQ(p.tensor_widths(), std::vector<int>{1});
  UnitProfile a, b;
  a.kind = b.kind = "GptBlock";
  a.slices = {slice(2), slice(4)};
  b.slices = {slice(2)};
  p.units = {a, b};
  EXPECT_EQ(p.tensor_widths(), (std::vector<int>{1, 2}));
  p.units[1].slices.clear();
  EXPECT_EQ(p.tensor_widths(), std::vector<int>{1});
}

TEST(Profile, TimesArePositiveAndGrowWithTheMicroBatch) {
  ProfileOptions o = quick(64);
  o.micro_batches = {1, 8};
  o.repeats = 3;
  const ModelProfile p = measure_profile("gpt:d_model=128,layers=1,heads=4,context=64", o);
  for (const UnitProfile& u : p.units) {
    EXPECT_GE(u.forward.fixed, 0) << u.name;
    EXPECT_GE(u.forward.per_sample, 0) << u.name;
    EXPECT_GT(u.forward.at(1), 0) << u.name;
    EXPECT_GT(u.backward.at(1), 0) << u.name;
  }
  const UnitProfile& block = p.units[1];
  EXPECT_GT(block.forward.at(8), block.forward.at(1));
  EXPECT_GT(block.backward.at(8), block.backward.at(1));
  EXPECT_GT(p.optimizer_s_per_param, 0);
  EXPECT_GE(p.threads, 1);
  EXPECT_FALSE(p.cpu.empty());
}

TEST(Profile, JsonRoundTrips) {
  const ModelProfile p =
      measure_profile("gpt:d_model=64,layers=2,heads=4,context=16", quick(16, {2}));
  const json j = profile_json(p);
  const ModelProfile q = parse_profile(json::parse(j.dump()), "profile.json");
  EXPECT_EQ(profile_json(q), j);
  EXPECT_EQ(q.params(), p.params());
  // profile_json on both sides would hide a field it drops: the parsed profile is compared
  // with the measured one field by field too.
  ASSERT_EQ(p.tensor_widths(), (std::vector<int>{1, 2}));
  EXPECT_EQ(q.tensor_widths(), p.tensor_widths());
  ASSERT_EQ(q.units.size(), p.units.size());
  for (size_t i = 0; i < p.units.size(); ++i) {
    const UnitProfile &a = p.units[i], &b = q.units[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.kind, a.kind);
    EXPECT_EQ(b.forward.fixed, a.forward.fixed);
    EXPECT_EQ(b.backward.per_sample, a.backward.per_sample);
    EXPECT_EQ(b.activation_bytes_per_sample, a.activation_bytes_per_sample);
    EXPECT_EQ(b.output_bytes_per_sample, a.output_bytes_per_sample);
    ASSERT_EQ(b.slices.size(), a.slices.size());
    for (size_t k = 0; k < a.slices.size(); ++k) {
      EXPECT_EQ(b.slices[k].forward.per_sample, a.slices[k].forward.per_sample);
      EXPECT_EQ(b.slices[k].backward_sum_bytes_per_sample,
                a.slices[k].backward_sum_bytes_per_sample);
      EXPECT_EQ(b.slices[k].forward_sums, a.slices[k].forward_sums);
      EXPECT_EQ(b.slices[k].params, a.slices[k].params);
    }
  }
  EXPECT_EQ(q.optimizer_s_per_param, p.optimizer_s_per_param);
  EXPECT_EQ(q.cpu, p.cpu);
  EXPECT_EQ(q.threads, p.threads);
  EXPECT_EQ(q.seq_len, p.seq_len);
  EXPECT_EQ(q.sample_bytes, p.sample_bytes);
  EXPECT_EQ(q.model, "gpt:d_model=64,layers=2,heads=4,context=16");
}

TEST(Profile, ParseNamesAnUnknownOrMissingKey) {
  ModelProfile p;
  p.model = "mlp";
  UnitProfile u;
  u.name = "0";
  u.slices = {slice(2)};
  p.units = {u};
  json j = profile_json(p);
  ASSERT_NO_THROW(parse_profile(j, "p.json"));

  json extra = j;
  extra["units"][0]["slices"][0]["colour"] = 1;
  const std::string e1 = error_of([&] { parse_profile(extra, "p.json"); });
  EXPECT_NE(e1.find("colour"), std::string::npos) << e1;
  EXPECT_NE(e1.find("p.json.units[0].slices[0]"), std::string::npos) << e1;

  json missing = j;
  missing["units"][0].erase("output_bytes_per_sample");
  const std::string e2 = error_of([&] { parse_profile(missing, "p.json"); });
  EXPECT_NE(e2.find("output_bytes_per_sample"), std::string::npos) << e2;
  EXPECT_NE(e2.find("p.json.units[0]"), std::string::npos) << e2;

  json wrong = j;
  wrong["threads"] = "four";
  EXPECT_NE(error_of([&] { parse_profile(wrong, "p.json"); }).find("threads"), std::string::npos);
}

TEST(Profile, GptSpecNamesABadKey) {
  const std::string e1 =
      error_of([] { measure_profile("gpt:d_model=64,layers=2,heads=4,depth=3"); });
  EXPECT_NE(e1.find("'depth'"), std::string::npos) << e1;
  EXPECT_NE(e1.find("mlp_ratio"), std::string::npos) << e1;  // the accepted keys
  const std::string e2 = error_of([] { measure_profile("gpt:d_model=64,layers=2"); });
  EXPECT_NE(e2.find("heads"), std::string::npos) << e2;
  const std::string e3 = error_of([] { measure_profile("gpt:d_model=64,layers=x,heads=4"); });
  EXPECT_NE(e3.find("layers"), std::string::npos) << e3;
  const std::string e4 =
      error_of([] { measure_profile("gpt:d_model=64,layers=2,heads=4,context=8", quick(16)); });
  EXPECT_NE(e4.find("seq_len 16"), std::string::npos) << e4;
}

TEST(Profile, CodecsAreMeasuredWithTheirOwnWireBytes) {
  const std::vector<CodecProfile> codecs = measure_codecs(int64_t{1} << 16, 1);
  ASSERT_EQ(codecs.size(), 2u);
  EXPECT_EQ(codecs[0].name, "int8");
  // int8: a byte a float and a scale per chunk, in place of 4 bytes.
  EXPECT_GT(codecs[0].wire_ratio, 0.2);
  EXPECT_LT(codecs[0].wire_ratio, 0.4);
  EXPECT_EQ(codecs[1].name, "powersgd");
  // PowerSGD rank 4 on a 256 x 256 matrix: (256 + 256) x 4 floats for 65536.
  EXPECT_LT(codecs[1].wire_ratio, 0.1);
  for (const CodecProfile& c : codecs) EXPECT_GE(c.seconds_per_float, 0);
}

}  // namespace
}  // namespace braid::plan
