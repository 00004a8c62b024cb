// Tensor parallelism against one process, with ranks as threads over the in-process
// transport: the vocabulary-parallel cross-entropy equals the dense one; the GPT cut across
// 2 and 4 ranks gives one process's loss, gradients' effect and parameters after several
// steps within rounding (the row-parallel products' partial sums add in another order), at
// fp32 and bf16, with accumulation and clipping; its gathered optimizer state is one
// process's layout and a one-process state loaded into it continues as one process does.
#include "parallel/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "comm/inproc_ranks.h"
#include "nn/loss.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::message;
using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int64_t kBatch = 4, kTokens = 16;

data::Batch tokens(int64_t step) {
  return token_batch(kBatch, kTokens, 500 + static_cast<uint64_t>(step));
}

std::unique_ptr<nn::Module> gpt() { return train::build_model("gpt-tiny", kTokens).module; }

struct Outcome {
  std::vector<float> params;
  std::vector<double> losses;
  optim::NamedTensors state;
};

optim::NamedTensors copied(const optim::NamedTensors& state) {
  optim::NamedTensors out;
  for (const auto& [name, t] : state) {
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    c.copy_from(t);
    out.emplace_back(name, c);
  }
  return out;
}

Outcome single(const StepOptions& o, int steps) {
  SingleProcess s(gpt(), o);
  Outcome out;
  for (int t = 0; t < steps; ++t) out.losses.push_back(s.step(tokens(t), kLr, t));
  out.params = params_of(s);
  out.state = copied(s.optimizer_state());
  return out;
}

// The one-process options' accumulate_steps become the micro-batches of the strategy (one
// pipeline stage: plain accumulation).
Outcome tensor(StepOptions o, int ranks, int steps, const Outcome* from = nullptr, int first = 0) {
  const int micro = o.accumulate_steps;
  o.accumulate_steps = 1;
  Outcome out;
  std::mutex mu;
  rethrow_first(run_group(ranks, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    TensorParallel s(gpt(), o, group, micro);
    EXPECT_LT(s.local_floats(), s.params().size() * 3 / 4 + 1000);  // about 1/T of the model
    if (from) {
      std::copy(from->params.begin(), from->params.end(), s.params().params());
      s.load_optimizer_state(from->state);
      s.sync_parameters();
    }
    std::vector<double> losses;
    for (int t = first; t < first + steps; ++t) losses.push_back(s.step(tokens(t), kLr, t));
    s.synchronize();
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()));
    s.gather_for_checkpoint();
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out.params = params_of(s);
      out.losses = losses;
      out.state = copied(s.optimizer_state());
    }
  }));
  return out;
}

// Whether float i of the GPT's flat buffer is an attention key bias: softmax ignores a
// constant added to a query's scores, so its gradient is zero but for rounding, and Adam
// (which divides by the gradient's own size) moves it by about lr in a direction rounding
// picks: one process and T ranks round differently. SGD's update of it stays at rounding.
bool key_bias(size_t i) {
  static const std::vector<std::pair<int64_t, int64_t>> ranges = [] {
    SingleProcess s(gpt(), options("sgd"));
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const nn::ParamInfo& p : s.params().layout())
      if (p.name.ends_with("attn.c_attn.bias")) {
        const int64_t D = p.numel() / 3;
        out.emplace_back(p.offset + D, p.offset + 2 * D);
      }
    return out;
  }();
  for (const auto& [b, e] : ranges)
    if (static_cast<int64_t>(i) >= b && static_cast<int64_t>(i) < e) return true;
  return false;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel,
                  const std::string& what, bool skip_key_bias = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float tol = rel * largest(want);
  for (size_t i = 0; i < got.size(); ++i) {
    if (skip_key_bias && key_bias(i)) continue;
    ASSERT_NEAR(got[i], want[i], tol) << what << " at float " << i;
  }
}

// Adam's update is scale-free: a weight whose gradient is near the rounding of the sums
// (a dead GELU unit's, a key projection's) moves by a fraction of lr that rounding picks.
// Almost every weight agrees as closely as under SGD; none is further than 5% of lr a step.
void expect_close_adam(const std::vector<float>& got, const std::vector<float>& want, int steps,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float tight = 1e-5f * largest(want);
  size_t loose = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (key_bias(i)) continue;
    const float d = std::fabs(got[i] - want[i]);
    ASSERT_LE(d, 0.05f * kLr * static_cast<float>(steps)) << what << " at float " << i;
    loose += d > tight;
  }
  EXPECT_LT(loose, got.size() / 1000) << what << ": " << loose << " weights beyond " << tight;
}

TEST(TensorParallel, VocabularyParallelCrossEntropyEqualsTheDenseOne) {
  constexpr int64_t N = 37, C = 24;
  Tensor logits = Tensor::empty({N, C});
  Tensor labels = Tensor::empty({N}, DType::i32);
  Rng rng(3);
  for (int64_t i = 0; i < N * C; ++i) logits.f32()[i] = 4 * rng.normal();
  for (int64_t i = 0; i < N; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng.below(C));
  labels.data<int32_t>()[5] = -1;                      // an ignored row
  logits.f32()[7 * C + 3] = logits.f32()[7 * C + 20];  // a tie across ranks
  Tensor dense_grad;
  const nn::LossResult dense =
      nn::softmax_cross_entropy(logits, labels, &dense_grad, {.grad_scale = 0.5f});
  for (int T : {2, 3, 4}) {
    rethrow_first(run_group(T, [&](comm::Group& world) {
      auto group = world.split(0, world.rank());
      GroupTensorReducer reducer(group);
      const int64_t part = C / T, first = group->rank() * part;
      Tensor mine = Tensor::empty({N, part});
      for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < part; ++j)
          mine.f32()[r * part + j] = logits.f32()[r * C + first + j];
      Tensor grad, work;
      const nn::LossResult got = nn::vocab_parallel_cross_entropy(
          mine, labels, first, C, reducer, &grad, work, {.grad_scale = 0.5f});
      EXPECT_NEAR(got.loss, dense.loss, 1e-6 * dense.loss) << "T=" << T;
      EXPECT_EQ(got.count, dense.count);
      EXPECT_NEAR(static_cast<double>(got.correct), static_cast<double>(dense.correct), 1.0);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < part; ++j)
          ASSERT_NEAR(grad.f32()[r * part + j], dense_grad.f32()[r * C + first + j], 1e-7)
              << "T=" << T << " row " << r << " class " << first + j;
    }));
  }
}

TEST(TensorParallel, GptEqualsOneProcessWithinRounding) {
  for (const char* opt : {"sgd", "adamw"}) {
    StepOptions o = options(opt);
    // Adam divides by the gradient's own size: with eps 1e-8 a weight whose gradient is at
    // the rounding level of the sums (a dead GELU unit's) moves by a fraction of lr that
    // rounding picks. eps 1e-4 keeps such weights still; the rest is Adam's arithmetic.
    o.optimizer.eps = 1e-4;
    o.accumulate_steps = 2;
    o.clip_grad_norm = 1.0f;
    const Outcome want = single(o, 3);
    for (int T : {2, 4}) {
      const Outcome got = tensor(o, T, 3);
      const std::string what = std::string(opt) + " T=" + std::to_string(T);
      for (size_t i = 0; i < want.losses.size(); ++i)
        EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]) << what;
      if (std::string(opt) == "adamw")
        expect_close_adam(got.params, want.params, 3, what);
      else
        expect_close(got.params, want.params, 1e-5f, what);
    }
  }
}

TEST(TensorParallel, Bf16EqualsOneProcessBf16WithinItsRounding) {
  StepOptions o = options("sgd");
  o.precision = nn::Precision::bf16;
  const Outcome want = single(o, 2);
  const Outcome got = tensor(o, 2, 2);
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-3 * want.losses[i]);
  expect_close(got.params, want.params, 1e-3f, "bf16");
}

TEST(TensorParallel, StateIsOneProcessLayoutAndResumesAsOneProcess) {
  StepOptions o = options("adamw");
  const Outcome first = single(o, 2);
  const Outcome both = single(o, 4);
  const Outcome resumed = tensor(o, 2, 2, &first, 2);
  expect_close_adam(resumed.params, both.params, 2, "resumed");
  // The gathered state holds one process's values, not just its names and shapes: Adam's
  // moments within 1e-4 of each tensor's largest value (they agree to ~3e-6 of it, the
  // gradients' rounding averaged and squared), the step count exactly. A shard left out of
  // the gather (zeros), one written at another rank's offsets or a moment of another name
  // is off by its own size.
  ASSERT_EQ(resumed.state.size(), both.state.size());
  for (size_t i = 0; i < both.state.size(); ++i) {
    const auto& [name, want] = both.state[i];
    const Tensor& got = resumed.state[i].second;
    EXPECT_EQ(resumed.state[i].first, name);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    ASSERT_EQ(got.dtype(), want.dtype()) << name;
    if (want.dtype() != DType::f32) {
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << name;
      continue;
    }
    const std::vector<float> w(want.f32(), want.f32() + want.numel());
    const float tol = 1e-4f * largest(w);
    ASSERT_GT(tol, 0) << name << " is all zeros";
    for (int64_t j = 0; j < want.numel(); ++j)
      ASSERT_NEAR(got.f32()[j], w[static_cast<size_t>(j)], tol) << name << " at float " << j;
  }
}

TEST(TensorParallel, ModelsItCannotCutAreRefusedNamingWhy) {
  auto results = run_group(3, [&](comm::Group& world) {  // 4 heads do not split 3 ways
    auto group = world.split(0, world.rank());
    TensorParallel s(gpt(), options("sgd"), group);
  });
  EXPECT_NE(message(results[0]).find("must be a multiple of the 3 ranks"), std::string::npos)
      << message(results[0]);
}

}  // namespace
}  // namespace braid::parallel

namespace braid::parallel {
namespace {

// The seeds' Keras example: an MLP's layers split across devices by width. Linear 1 and 3
// form a pair (column- then row-parallel), the last Linear stays whole on every rank.
json wide_mlp() {
  return json::parse(R"({"input": [12, 12, 1], "layers": [{"type": "flatten"},
      {"type": "linear", "out_features": 64}, {"type": "relu"},
      {"type": "linear", "out_features": 48}, {"type": "tanh"},
      {"type": "linear", "out_features": 10}]})");
}

TEST(TensorParallel, WidthSplitSequentialEqualsOneProcessWithinRounding) {
  StepOptions o = options("sgd");
  o.clip_grad_norm = 1.0f;
  SingleProcess one(train::build_model(wide_mlp()).module, o);
  for (int t = 0; t < 3; ++t) one.step(global_batch(16, t), kLr, t);
  const std::vector<float> want = params_of(one);
  for (int T : {2, 4}) {
    std::vector<float> got;
    int64_t local = 0;
    rethrow_first(run_group(T, [&](comm::Group& world) {
      auto group = world.split(0, world.rank());
      TensorParallel s(train::build_model(wide_mlp()).module, o, group);
      for (int t = 0; t < 3; ++t) s.step(global_batch(16, t), kLr, t);
      s.synchronize();
      if (group->rank() == 0) {
        got = params_of(s);
        local = s.local_floats();
      }
    }));
    expect_close(got, want, 1e-5f, "sequential T=" + std::to_string(T));
    EXPECT_LT(local, static_cast<int64_t>(want.size()) * 3 / 4) << "T=" << T;
  }
  const auto refused = run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    TensorParallel s(train::build_model(small_cnn()).module, options("sgd"), group);
  });
  EXPECT_NE(message(refused[0]).find("cannot be cut by width"), std::string::npos)
      << message(refused[0]);
}

}  // namespace
}  // namespace braid::parallel
