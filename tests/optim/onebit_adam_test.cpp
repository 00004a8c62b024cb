// 1-bit Adam's optimizer: bit for bit braid's Adam for freeze_step steps, then a step with
// the variance frozen and the gradient argument taken as the momentum, checked against the
// formula in double; both ways of stepping and a resumed checkpoint switch at one step.
#include "optim/onebit_adam.h"

#include <cstring>

#include "optim/adam.h"
#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// Gradients for any number of steps (the fixture has three), padding float included.
std::vector<float> grads_at(int step) {
  std::vector<float> g(kSize);
  for (int64_t i = 0; i < kSize; ++i)
    g[static_cast<size_t>(i)] = 0.3f * std::sin(0.7f * static_cast<float>(step * kSize + i) + 1);
  return g;
}
float lr_at(int step) { return 0.05f / static_cast<float>(1 + step); }

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

std::vector<float> copy_state(const Optimizer& opt, size_t k) {
  const float* p = opt.state()[k].second.f32();
  return {p, p + opt.buffer_size()};
}

NamedTensors snapshot(const Optimizer& opt) {
  NamedTensors out;
  for (const auto& [name, t] : opt.state()) {
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    c.copy_from(t);
    out.emplace_back(name, std::move(c));
  }
  return out;
}

void expect_warm_up_is_adam(const AdamOptions& adam) {
  constexpr int kFreeze = 5;
  Adam reference(example_segments(), kSize, adam);
  OnebitAdam opt(example_segments(), kSize, {adam, kFreeze});
  std::vector<float> p_ref = example_params(), p = example_params();
  for (int t = 0; t < kFreeze; ++t) {
    const std::vector<float> g = grads_at(t);
    reference.step(p_ref.data(), g.data(), lr_at(t));
    opt.step(p.data(), g.data(), lr_at(t));
    EXPECT_TRUE(same_bits(p.data(), p_ref.data(), kSize)) << "parameters at step " << t + 1;
    for (size_t k = 0; k < 2; ++k)
      EXPECT_TRUE(same_bits(opt.state()[k].second.f32(), reference.state()[k].second.f32(), kSize))
          << reference.state()[k].first << " at step " << t + 1;
  }
}

TEST(OnebitAdam, WarmUpIsBitwiseAdam) { expect_warm_up_is_adam({.beta1 = 0.9f, .beta2 = 0.99f}); }

// Weight decay mixed into the gradient would enter the variance the optimizer divides by
// and not the codec's, which sees the gradients alone.
TEST(OnebitAdam, RefusesL2DecayInTheGradient) {
  EXPECT_THROW(OnebitAdam(example_segments(), kSize, {{.weight_decay = 0.1f}, 3}), Error);
  EXPECT_NO_THROW(OnebitAdam(example_segments(), kSize, {{.weight_decay = 0.0f}, 3}));
}

TEST(OnebitAdam, WarmUpIsBitwiseAdamW) {
  expect_warm_up_is_adam(
      {.beta1 = 0.8f, .beta2 = 0.999f, .weight_decay = 0.5f, .decoupled_weight_decay = true});
}

// After freeze_step Adam steps: v stays, m is the input, and
// p = p (1 - lr wd) - lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^T) + eps).
TEST(OnebitAdam, FrozenStepMatchesTheFormula) {
  constexpr int kFreeze = 3;
  // The options are floats: the reference takes their values, not the decimals.
  const double b1 = 0.9f, b2 = 0.99f, eps = 1e-8f, wd = 0.1f;
  OnebitAdam opt(
      example_segments(), kSize,
      {{.beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f, .decoupled_weight_decay = true},
       kFreeze});
  std::vector<float> p = example_params();
  for (int t = 0; t < kFreeze; ++t) opt.step(p.data(), grads_at(t).data(), lr_at(t));
  const std::vector<float> v = copy_state(opt, 1);
  for (int t = kFreeze; t < kFreeze + 2; ++t) {
    // The momentum as the codec would hand it over: anything, the padding included.
    std::vector<float> m = grads_at(100 + t);
    const std::vector<float> before = p;
    opt.step(p.data(), m.data(), lr_at(t));
    EXPECT_TRUE(same_bits(copy_state(opt, 1).data(), v.data(), kSize)) << "v moved at " << t + 1;
    const std::vector<float> exp_avg = copy_state(opt, 0);
    for (const RefSegment& s : ref_segments()) {
      for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
        const auto k = static_cast<size_t>(i);
        EXPECT_EQ(exp_avg[k], m[k]) << "exp_avg is the input momentum, element " << i;
        const double step = t + 1;
        const double keep = s.decay ? 1 - double{lr_at(t)} * wd : 1.0;
        const double den = std::sqrt(double{v[k]}) / std::sqrt(1 - std::pow(b2, kFreeze)) + eps;
        const double want = before[k] * keep - lr_at(t) / (1 - std::pow(b1, step)) * m[k] / den;
        EXPECT_NEAR(p[k], want, 5e-7 * std::max(1.0, std::abs(want)))
            << "step " << t + 1 << " element " << i;
      }
    }
    EXPECT_EQ(p[3], kPad) << "padding written at step " << t + 1;
  }
}

TEST(OnebitAdam, FrozenStepWithAdamWDecaysTheParameters) {
  constexpr int kFreeze = 1;
  OnebitAdam opt(example_segments(), kSize,
                 {{.weight_decay = 0.5f, .decoupled_weight_decay = true}, kFreeze});
  std::vector<float> p = example_params();
  opt.step(p.data(), grads_at(0).data(), 0.1f);
  const std::vector<float> v = copy_state(opt, 1), before = p, m = grads_at(7);
  opt.step(p.data(), m.data(), 0.1f);
  for (const RefSegment& s : ref_segments()) {
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
      const auto k = static_cast<size_t>(i);
      const double lr = 0.1f, b1 = 0.9f, b2 = 0.999f;
      const double keep = s.decay ? 1 - lr * 0.5 : 1.0;
      const double den = std::sqrt(double{v[k]}) / std::sqrt(1 - b2) + double{1e-8f};
      const double want = before[k] * keep - lr / (1 - b1 * b1) * m[k] / den;
      EXPECT_NEAR(p[k], want, 5e-7 * std::max(1.0, std::abs(want))) << "element " << i;
    }
  }
}

// step() and step_range() per segment + finish_step() give the same bits on both sides of
// the switch, so every path counts the step the phase is chosen by alike.
TEST(OnebitAdam, StepInPartsSwitchesAtTheSameStep) {
  const OnebitAdamOptions o{{.weight_decay = 0.1f, .decoupled_weight_decay = true}, 3};
  OnebitAdam whole(example_segments(), kSize, o), parts(example_segments(), kSize, o);
  std::vector<float> p_whole = example_params(), p_parts = example_params();
  for (int t = 0; t < 7; ++t) {
    const std::vector<float> g = grads_at(t);
    whole.step(p_whole.data(), g.data(), lr_at(t));
    parts.step_range(p_parts.data(), g.data(), lr_at(t), 4, 6);  // the bias first
    parts.step_range(p_parts.data(), g.data(), lr_at(t), 0, 3);
    parts.finish_step();
    EXPECT_EQ(parts.steps(), t + 1);
    EXPECT_TRUE(same_bits(p_parts.data(), p_whole.data(), kSize)) << "step " << t + 1;
  }
}

// A checkpoint taken before or after the switch resumes with the same bits.
TEST(OnebitAdam, StateRoundTripsOnBothSidesOfTheSwitch) {
  const OnebitAdamOptions o{{.weight_decay = 0.1f, .decoupled_weight_decay = true}, 3};
  for (int saved_at : {2, 4}) {
    OnebitAdam a(example_segments(), kSize, o);
    std::vector<float> p = example_params();
    for (int t = 0; t < saved_at; ++t) a.step(p.data(), grads_at(t).data(), lr_at(t));
    const NamedTensors saved = snapshot(a);
    ASSERT_EQ(saved.size(), 3u);
    EXPECT_EQ(saved[0].first, "exp_avg");
    EXPECT_EQ(saved[1].first, "exp_avg_sq");
    EXPECT_EQ(saved[2].first, "step");
    EXPECT_EQ(*saved[2].second.data<int64_t>(), saved_at);
    OnebitAdam b(example_segments(), kSize, o);
    b.load_state(saved);
    EXPECT_EQ(b.steps(), saved_at);
    std::vector<float> q = p;
    for (int t = saved_at; t < 6; ++t) {
      a.step(p.data(), grads_at(t).data(), lr_at(t));
      b.step(q.data(), grads_at(t).data(), lr_at(t));
      EXPECT_TRUE(same_bits(p.data(), q.data(), kSize))
          << "saved at " << saved_at << ", step " << t + 1;
    }
  }
}

TEST(OnebitAdam, BadCheckpointChangesNothing) {
  OnebitAdam a(example_segments(), kSize, {{}, 3});
  std::vector<float> p = example_params();
  a.step(p.data(), grads_at(0).data(), 0.1f);
  NamedTensors bad = snapshot(a);
  bad.pop_back();  // no "step"
  const std::vector<float> m = copy_state(a, 0);
  EXPECT_THROW(a.load_state(bad), Error);
  EXPECT_EQ(a.steps(), 1);
  EXPECT_EQ(copy_state(a, 0), m);
}

TEST(OnebitAdam, MadeByNameWithItsFreezeStep) {
  OptimizerConfig c;
  c.name = "onebit_adam";
  c.freeze_step = 7;
  const auto opt = make_optimizer(c, example_segments(), kSize);
  EXPECT_EQ(opt->name(), "onebit_adam");
  EXPECT_EQ(dynamic_cast<const OnebitAdam&>(*opt).freeze_step(), 7);
  c.freeze_step = 0;
  EXPECT_THROW(make_optimizer(c, example_segments(), kSize), Error);
}

// A float that never had a gradient before the freeze (variance 0) is not moved by the
// 1-bit momentum the codec hands in for it (its scale, not a signal); the others are.
TEST(OnebitAdam, AFloatWhoseVarianceFrozeAtZeroStays) {
  OnebitAdam opt(example_segments(), kSize, {{.beta1 = 0.9f, .beta2 = 0.99f}, 1});
  std::vector<float> p = example_params();
  std::vector<float> g = grads_at(0);
  g[0] = 0.0f;  // float 0: no gradient during the warm-up
  opt.step(p.data(), g.data(), 0.01f);
  const std::vector<float> before = p;
  const std::vector<float> momentum(kSize, 0.5f);
  opt.step(p.data(), momentum.data(), 0.01f);
  EXPECT_EQ(p[0], before[0]);
  EXPECT_NE(p[1], before[1]);
}

}  // namespace
}  // namespace braid::optim::test
