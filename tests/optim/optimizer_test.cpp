// The Optimizer contract, checked for every optimizer through the factory: step counts,
// checkpoint round trips, no allocation in step(), segment validation, sharding.
#include "optim/optimizer.h"

#include <cstring>
#include <string>

#include "core/memory.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// One config per optimizer, with every option that changes the state set.
std::vector<OptimizerConfig> all_configs() {
  std::vector<OptimizerConfig> out;
  for (std::string_view name : optimizer_names()) {
    OptimizerConfig c;
    c.name = std::string(name);
    c.momentum = 0.9f;
    c.weight_decay = 0.05f;
    c.initial_accumulator_value = 0.1f;
    c.trust_coefficient = 0.1f;
    out.push_back(c);
  }
  OptimizerConfig nesterov;
  nesterov.name = "sgd";
  nesterov.momentum = 0.9f;
  nesterov.nesterov = true;
  out.push_back(nesterov);
  return out;
}

// A longer buffer than the fixture's, so the vector loops run their main bodies and tails.
constexpr int64_t kBig = 100;
std::vector<Segment> big_segments() {
  return {{"a.weight", 0, 48, true}, {"a.bias", 48, 5, false}, {"b.weight", 64, 36, true}};
}
std::vector<float> big_values(int seed) {
  std::vector<float> v(kBig);
  for (int64_t i = 0; i < kBig; ++i)
    v[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 37 + seed * 11) % 41 - 20);
  return v;
}

NamedTensors deep_copy(const NamedTensors& state) {
  NamedTensors out;
  for (const auto& [name, t] : state) {
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    c.copy_from(t);
    out.emplace_back(name, c);
  }
  return out;
}

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

TEST(Optimizer, FactoryBuildsEveryNamedOptimizer) {
  for (const OptimizerConfig& c : all_configs()) {
    const auto opt = make_optimizer(c, example_segments(), kSize);
    EXPECT_EQ(opt->name(), c.name);
    EXPECT_EQ(opt->steps(), 0);
  }
}

TEST(Optimizer, UnknownNameListsTheAcceptedOnes) {
  OptimizerConfig c;
  c.name = "adamax";
  try {
    make_optimizer(c, example_segments(), kSize);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("adamax"), std::string::npos) << msg;
    for (std::string_view n : optimizer_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

TEST(Optimizer, FactoryUsesEachOptimizersDefaultEps) {
  // Adagrad's eps is 1e-10 unless set: with a zero accumulator start and one step the
  // update is lr * g / (|g| + eps) ~ lr, and a 1e-8 eps would not change that either, so
  // check via a tiny gradient where eps matters.
  OptimizerConfig c;
  c.name = "adagrad";
  std::vector<float> p = {0.0f}, g = {1e-9f};
  make_optimizer(c, {{"w", 0, 1, true}}, 1)->step(p.data(), g.data(), 1.0f);
  EXPECT_NEAR(p[0], -1e-9 / (1e-9 + 1e-10), 1e-6);
  c.eps = 1e-9f;
  p = {0.0f};
  make_optimizer(c, {{"w", 0, 1, true}}, 1)->step(p.data(), g.data(), 1.0f);
  EXPECT_NEAR(p[0], -0.5, 1e-6);
}

TEST(Optimizer, StateRoundTripContinuesBitwise) {
  for (const OptimizerConfig& c : all_configs()) {
    SCOPED_TRACE(c.name + (c.nesterov ? " nesterov" : ""));
    auto straight = make_optimizer(c, big_segments(), kBig);
    auto first = make_optimizer(c, big_segments(), kBig);
    std::vector<float> p_straight = big_values(0), p_resumed = big_values(0);
    for (int t = 0; t < 5; ++t) {
      const std::vector<float> g = big_values(t + 1);
      straight->step(p_straight.data(), g.data(), 0.05f);
      if (t < 2) first->step(p_resumed.data(), g.data(), 0.05f);
    }
    const NamedTensors saved = deep_copy(first->state());
    first.reset();
    auto resumed = make_optimizer(c, big_segments(), kBig);
    resumed->load_state(saved);
    EXPECT_EQ(resumed->steps(), 2);
    for (int t = 2; t < 5; ++t) {
      const std::vector<float> g = big_values(t + 1);
      resumed->step(p_resumed.data(), g.data(), 0.05f);
    }
    EXPECT_EQ(resumed->steps(), 5);
    expect_bitwise_equal(p_straight, p_resumed, "parameters");
    const NamedTensors a = straight->state(), b = resumed->state();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k + 1 < a.size(); ++k) {
      EXPECT_EQ(a[k].first, b[k].first);
      EXPECT_EQ(std::memcmp(a[k].second.raw(), b[k].second.raw(), a[k].second.nbytes()), 0)
          << a[k].first;
    }
    EXPECT_EQ(*b.back().second.data<int64_t>(), 5);
  }
}

TEST(Optimizer, StateTensorsAreOptimizerMemoryWithTheBufferLayout) {
  const auto before = MemoryTracker::process().snapshot();
  OptimizerConfig c;
  c.name = "adam";
  auto opt = make_optimizer(c, big_segments(), kBig);
  const auto after = MemoryTracker::process().snapshot();
  const auto cat = static_cast<size_t>(MemCategory::optimizer);
  EXPECT_EQ(after.current[cat] - before.current[cat], 2 * kBig * 4);
  for (const auto& [name, t] : opt->state()) {
    if (name == "step") {
      EXPECT_EQ(t.dtype(), DType::i64);
      EXPECT_EQ(t.shape(), Shape{});
    } else {
      EXPECT_EQ(t.dtype(), DType::f32);
      EXPECT_EQ(t.shape(), Shape({kBig}));
    }
  }
}

TEST(Optimizer, StepAllocatesNothing) {
  for (const OptimizerConfig& c : all_configs()) {
    auto opt = make_optimizer(c, big_segments(), kBig);
    std::vector<float> p = big_values(0);
    const std::vector<float> g = big_values(1);
    const int64_t allocations = MemoryTracker::process().allocations();
    for (int t = 0; t < 3; ++t) opt->step(p.data(), g.data(), 0.01f);
    EXPECT_EQ(MemoryTracker::process().allocations(), allocations) << c.name;
  }
}

TEST(Optimizer, LoadStateRejectsMismatches) {
  OptimizerConfig c;
  c.name = "adam";
  auto opt = make_optimizer(c, example_segments(), kSize);
  const auto expect_error = [&](const NamedTensors& state, std::vector<std::string> words) {
    try {
      opt->load_state(state);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& w : words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  };
  NamedTensors good = deep_copy(opt->state());
  NamedTensors wrong_shape = good;
  wrong_shape[1].second = Tensor::empty({kSize + 1});
  expect_error(wrong_shape, {"exp_avg_sq", "[6]", "[7]"});
  NamedTensors missing(good.begin() + 1, good.end());
  expect_error(missing, {"exp_avg", "missing"});
  NamedTensors extra = good;
  extra.emplace_back("momentum_buffer", Tensor::empty({kSize}));
  expect_error(extra, {"momentum_buffer", "unexpected"});
  NamedTensors wrong_dtype = good;
  wrong_dtype.back().second = Tensor::empty(Shape{}, DType::f32);
  expect_error(wrong_dtype, {"step", "i64", "f32"});
  // A failed load changes nothing.
  EXPECT_EQ(opt->steps(), 0);
  // An SGD checkpoint does not load into Adam.
  auto sgd =
      make_optimizer(OptimizerConfig{.name = "sgd", .momentum = 0.9f}, example_segments(), kSize);
  expect_error(sgd->state(), {"momentum_buffer"});
  // And the good one loads, in any order.
  *good.back().second.data<int64_t>() = 7;
  std::swap(good[0], good[2]);
  opt->load_state(good);
  EXPECT_EQ(opt->steps(), 7);
}

TEST(Optimizer, BadSegmentsAreErrorsNamingThem) {
  const auto expect_error = [](std::vector<Segment> segments, int64_t size, std::string word) {
    try {
      Sgd opt(std::move(segments), size);
      ADD_FAILURE() << "no error for " << word;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  expect_error({{"w", 0, 3, true}, {"b", 2, 2, false}}, 6, "overlap");
  expect_error({{"w", 4, 3, true}}, 6, "'w'");
  expect_error({{"w", -1, 3, true}}, 6, "'w'");
  Sgd ok({{"w", 0, 3, true}, {"empty", 1, 0, false}, {"b", 3, 3, false}}, 6);
  EXPECT_EQ(ok.segments().size(), 3u);
}

TEST(Optimizer, BadLearningRateIsAnError) {
  Sgd opt(example_segments(), kSize);
  std::vector<float> p = example_params(), g = example_grads(0);
  EXPECT_THROW(opt.step(p.data(), g.data(), -0.1f), Error);
  EXPECT_THROW(opt.step(p.data(), g.data(), std::nanf("")), Error);
  EXPECT_EQ(opt.steps(), 0);
}

// ZeRO readiness: two optimizers over rebased halves of the buffer (split at a segment
// boundary) give bitwise the same result as one over the whole buffer.
TEST(Optimizer, ShardsAtSegmentBoundariesMatchTheWhole) {
  for (const OptimizerConfig& c : all_configs()) {
    auto whole = make_optimizer(c, big_segments(), kBig);
    auto low = make_optimizer(c, {{"a.weight", 0, 48, true}, {"a.bias", 48, 5, false}}, 64);
    auto high = make_optimizer(c, {{"b.weight", 0, 36, true}}, 36);
    std::vector<float> p_whole = big_values(0), p_sharded = big_values(0);
    for (int t = 0; t < 3; ++t) {
      const std::vector<float> g = big_values(t + 1);
      whole->step(p_whole.data(), g.data(), 0.03f);
      low->step(p_sharded.data(), g.data(), 0.03f);
      high->step(p_sharded.data() + 64, g.data() + 64, 0.03f);
    }
    expect_bitwise_equal(p_whole, p_sharded, c.name);
  }
}

TEST(Optimizer, StepInPartsMatchesOneStepBitwise) {
  for (const OptimizerConfig& c : all_configs()) {
    auto whole = make_optimizer(c, big_segments(), kBig);
    auto parts = make_optimizer(c, big_segments(), kBig);
    std::vector<float> p_whole = big_values(0), p_parts = big_values(0);
    for (int t = 0; t < 3; ++t) {
      const std::vector<float> g = big_values(t + 1);
      whole->step(p_whole.data(), g.data(), 0.03f);
      // Last segment first, as a backward pass reaches them.
      parts->step_range(p_parts.data(), g.data(), 0.03f, 64, kBig);
      parts->step_range(p_parts.data(), g.data(), 0.03f, 0, 64);
      parts->finish_step();
      EXPECT_EQ(parts->steps(), t + 1) << c.name;
    }
    expect_bitwise_equal(p_whole, p_parts, c.name);
  }
}

TEST(Optimizer, StepInPartsMustCoverEverySegment) {
  auto opt = make_optimizer(OptimizerConfig{.name = "sgd", .momentum = 0}, big_segments(), kBig);
  std::vector<float> p = big_values(0);
  const std::vector<float> g = big_values(1);
  opt->step_range(p.data(), g.data(), 0.1f, 0, 64);
  EXPECT_THROW(opt->finish_step(), Error);                   // b.weight not updated yet
  EXPECT_THROW(opt->step(p.data(), g.data(), 0.1f), Error);  // a step in parts is under way
  EXPECT_THROW(opt->step_range(p.data(), g.data(), 0.1f, 64, kBig + 1), Error);  // past the end
  EXPECT_THROW(opt->step_range(p.data(), g.data(), 0.1f, 70, kBig), Error);      // cuts b.weight
  opt->step_range(p.data(), g.data(), 0.1f, 64, kBig);
  opt->finish_step();
  EXPECT_EQ(opt->steps(), 1);
}

}  // namespace
}  // namespace braid::optim::test
