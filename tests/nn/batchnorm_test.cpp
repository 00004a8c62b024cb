// BatchNorm1d/2d against finite differences (train and eval mode), hand-computed
// normalisation and running statistics, PyTorch's names, and shape errors; a one-rank
// SyncBatchNorm reducer against the local layer (N ranks: tests/parallel).
#include "nn/batchnorm.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::GradCheckOptions;
using testing::random_input;

// Per-channel mean and biased variance of x[rows, C], in double.
void reference_moments(const Tensor& x, int64_t C, std::vector<double>& mean,
                       std::vector<double>& var) {
  const int64_t rows = x.numel() / C;
  mean.assign(static_cast<size_t>(C), 0.0);
  var.assign(static_cast<size_t>(C), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) mean[static_cast<size_t>(c)] += x.f32()[r * C + c];
  for (auto& m : mean) m /= static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const double d = x.f32()[r * C + c] - mean[static_cast<size_t>(c)];
      var[static_cast<size_t>(c)] += d * d;
    }
  for (auto& v : var) v /= static_cast<double>(rows);
}

// A declared, allocated layer with non-trivial weight and bias.
template <typename BN>
struct Layer {
  BN bn;
  ParamSet params;
  explicit Layer(int64_t C) : bn(C) {
    bn.declare(params, "bn.");
    params.allocate();
    Rng rng(2);
    bn.init(rng);
    for (int64_t c = 0; c < C; ++c) {
      params.param(0).f32()[c] = 1.0f + 0.3f * rng.normal();
      params.param(1).f32()[c] = 0.5f * rng.normal();
    }
  }
};

TEST(BatchNorm, TrainModeGradientsMatchFiniteDifferences) {
  BatchNorm1d bn1(5);
  expect_gradients_match(bn1, random_input({6, 5}));
  BatchNorm2d bn2(5);
  expect_gradients_match(bn2, random_input({2, 3, 4, 5}));
}

// Sets running statistics away from (0, 1) after init, so eval mode is tested with
// statistics that differ from the batch's.
class WithRunningStats : public Module {
 public:
  explicit WithRunningStats(BatchNorm& bn) : bn_(bn) {}
  std::string_view kind() const override { return bn_.kind(); }
  void declare(ParamSet& p, const std::string& prefix) override { bn_.declare(p, prefix); }
  void init(Rng& rng) override {
    bn_.init(rng);
    for (int64_t c = 0; c < bn_.channels(); ++c) {
      bn_.running_mean().f32()[c] = 0.3f * static_cast<float>(c) - 0.5f;
      bn_.running_var().f32()[c] = 0.5f + 0.25f * static_cast<float>(c);
    }
  }
  Shape output_shape(const Shape& in) const override { return bn_.output_shape(in); }
  std::unique_ptr<Cache> make_cache() const override { return bn_.make_cache(); }
  const Tensor& forward(const Tensor& x, Cache& c, const ForwardContext& ctx) override {
    return bn_.forward(x, c, ctx);
  }
  const Tensor& backward(const Tensor& dy, Cache& c, bool need_dx) override {
    return bn_.backward(dy, c, need_dx);
  }

 private:
  BatchNorm& bn_;
};

TEST(BatchNorm, EvalModeGradientsMatchFiniteDifferences) {
  GradCheckOptions opt;
  opt.mode = Mode::eval;
  BatchNorm1d bn1(4);
  WithRunningStats m1(bn1);
  expect_gradients_match(m1, random_input({5, 4}), opt);
  BatchNorm2d bn2(3);
  WithRunningStats m2(bn2);
  expect_gradients_match(m2, random_input({2, 3, 3, 3}), opt);
  EXPECT_EQ(bn2.num_batches_tracked(), 0);  // eval mode leaves the statistics alone
}

TEST(BatchNorm, TrainForwardNormalisesWithBatchStatistics) {
  Layer<BatchNorm2d> l(3);
  Tensor x = random_input({2, 4, 3, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * x.f32()[i] + 1.5f;
  auto cache = l.bn.make_cache();
  const Tensor& y = l.bn.forward(x, *cache, ForwardContext());
  std::vector<double> mean, var;
  reference_moments(x, 3, mean, var);
  const float* w = l.params.param(0).f32();
  const float* b = l.params.param(1).f32();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t c = static_cast<size_t>(i % 3);
    const double ref = (x.f32()[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * w[c] + b[c];
    ASSERT_NEAR(y.f32()[i], ref, 1e-5) << i;
  }
}

TEST(BatchNorm, RunningStatisticsFollowPyTorch) {
  Layer<BatchNorm1d> l(3);
  Tensor x1 = random_input({8, 3}, 5), x2 = random_input({8, 3}, 6);
  for (int64_t i = 0; i < x2.numel(); ++i) x2.f32()[i] = 3.0f * x2.f32()[i] - 2.0f;
  auto cache = l.bn.make_cache();
  l.bn.forward(x1, *cache, ForwardContext());
  l.bn.forward(x2, *cache, ForwardContext());
  std::vector<double> m1, v1, m2, v2;
  reference_moments(x1, 3, m1, v1);
  reference_moments(x2, 3, m2, v2);
  const double unbias = 8.0 / 7.0;
  for (size_t c = 0; c < 3; ++c) {
    const double rm = 0.9 * (0.9 * 0.0 + 0.1 * m1[c]) + 0.1 * m2[c];
    const double rv = 0.9 * (0.9 * 1.0 + 0.1 * v1[c] * unbias) + 0.1 * v2[c] * unbias;
    EXPECT_NEAR(l.bn.running_mean().f32()[c], rm, 1e-5) << c;
    EXPECT_NEAR(l.bn.running_var().f32()[c], rv, 1e-5) << c;
  }
  EXPECT_EQ(l.bn.num_batches_tracked(), 2);

  // Eval mode normalises with exactly those statistics and does not count a batch.
  ForwardContext eval;
  eval.mode = Mode::eval;
  const Tensor& y = l.bn.forward(x1, *cache, eval);
  const float* w = l.params.param(0).f32();
  const float* b = l.params.param(1).f32();
  for (int64_t i = 0; i < x1.numel(); ++i) {
    const int64_t c = i % 3;
    const double ref = (x1.f32()[i] - l.bn.running_mean().f32()[c]) /
                           std::sqrt(l.bn.running_var().f32()[c] + 1e-5) * w[c] +
                       b[c];
    EXPECT_NEAR(y.f32()[i], ref, 1e-5) << i;
  }
  EXPECT_EQ(l.bn.num_batches_tracked(), 2);
}

TEST(BatchNorm, StaysAccurateWhenTheMeanDwarfsTheSpread) {
  Layer<BatchNorm1d> l(2);
  // Summing 4096 values near 100 in float, or E[x^2] - E[x]^2, would be off by more
  // than the tolerance here.
  Tensor x = random_input({4096, 2}, 8);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 100.0f + 0.1f * x.f32()[i];
  auto cache = l.bn.make_cache();
  const Tensor& y = l.bn.forward(x, *cache, ForwardContext());
  std::vector<double> mean, var;
  reference_moments(x, 2, mean, var);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t c = static_cast<size_t>(i % 2);
    const double ref =
        (x.f32()[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * l.params.param(0).f32()[c] +
        l.params.param(1).f32()[c];
    ASSERT_NEAR(y.f32()[i], ref, 5e-4) << i;
  }
}

TEST(BatchNorm, NamesAndBuffersMatchPyTorch) {
  Layer<BatchNorm2d> l(4);
  ASSERT_EQ(l.params.layout().size(), 2u);
  EXPECT_EQ(l.params.info(0).name, "bn.weight");
  EXPECT_EQ(l.params.info(1).name, "bn.bias");
  EXPECT_FALSE(l.params.info(0).decay);
  EXPECT_FALSE(l.params.info(1).decay);
  const auto& buffers = l.params.buffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0].name, "bn.running_mean");
  EXPECT_EQ(buffers[1].name, "bn.running_var");
  EXPECT_EQ(buffers[2].name, "bn.num_batches_tracked");
  EXPECT_EQ(buffers[0].value.shape(), Shape({4}));
  EXPECT_EQ(buffers[2].value.dtype(), DType::i64);
  EXPECT_EQ(buffers[2].value.rank(), 0);
  EXPECT_EQ(buffers[2].value.numel(), 1);
  // The buffers are shared with the module, not copies.
  EXPECT_EQ(buffers[0].value.raw(), l.bn.running_mean().raw());
  Rng rng(1);
  l.bn.init(rng);
  EXPECT_EQ(l.params.param(0).f32()[2], 1.0f);
  EXPECT_EQ(l.params.param(1).f32()[2], 0.0f);
  EXPECT_EQ(l.bn.running_var().f32()[2], 1.0f);
  EXPECT_EQ(l.bn.running_mean().f32()[2], 0.0f);
}

TEST(BatchNorm, SkipsDxWhenNotNeededAndReusesBuffers) {
  Layer<BatchNorm1d> l(3);
  Tensor x = random_input({4, 3});
  auto cache = l.bn.make_cache();
  l.bn.forward(x, *cache, ForwardContext());
  l.params.zero_grads();
  EXPECT_FALSE(l.bn.backward(random_input({4, 3}, 7), *cache, false).defined());
  EXPECT_NE(l.params.grad(1).f32()[0], 0.0f);  // parameter gradients still accumulate
  // A second step reuses every buffer.
  const int64_t before = MemoryTracker::process().allocations();
  l.bn.forward(x, *cache, ForwardContext());
  l.bn.backward(x, *cache, true);
  l.bn.forward(x, *cache, ForwardContext());
  l.bn.backward(x, *cache, true);
  EXPECT_EQ(MemoryTracker::process().allocations(), before + 1);  // dx, first time only
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BatchNorm, ShapeErrorsNameBothShapes) {
  const std::string wrong_c = error_of([] { BatchNorm2d(3).output_shape({2, 4, 4, 5}); });
  EXPECT_NE(wrong_c.find("[2, 4, 4, 5]"), std::string::npos) << wrong_c;
  EXPECT_NE(wrong_c.find("[B, H, W, 3]"), std::string::npos) << wrong_c;
  EXPECT_NE(wrong_c.find("BatchNorm2d"), std::string::npos) << wrong_c;
  const std::string wrong_rank = error_of([] { BatchNorm1d(3).output_shape({2, 4, 4, 3}); });
  EXPECT_NE(wrong_rank.find("[B, 3]"), std::string::npos) << wrong_rank;
  Layer<BatchNorm1d> l(3);
  auto cache = l.bn.make_cache();
  const std::string one_row = error_of([&] {
    l.bn.forward(random_input({1, 3}), *cache, ForwardContext());
  });
  EXPECT_NE(one_row.find("more than one value"), std::string::npos) << one_row;
}

// A reducer over one rank: the gather is a copy and the sum the identity. Counts calls.
class OneRankReducer : public StatsReducer {
 public:
  int size() const override { return 1; }
  void allgather(const double* send, double* recv, size_t count) override {
    ++gathers;
    std::memcpy(recv, send, count * sizeof(double));
  }
  void sum(double*, size_t) override { ++sums; }
  int gathers = 0, sums = 0;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// With one rank, the merge of the gathered moments returns that rank's own, so the
// reducer path must be the local layer bit for bit: output, dx, parameter gradients and
// running statistics, over two steps and an eval pass.
template <typename BN>
void expect_one_rank_reducer_is_local(const Shape& shape) {
  const int64_t C = shape[-1];
  auto reducer = std::make_shared<OneRankReducer>();
  Layer<BN> local(C);
  BN synced(C, reducer);
  ParamSet params;
  synced.declare(params, "bn.");
  params.allocate();
  std::memcpy(params.params(), local.params.params(), sizeof(float) * local.params.size());
  auto local_cache = local.bn.make_cache(), synced_cache = synced.make_cache();
  local.params.zero_grads();
  params.zero_grads();
  for (uint64_t step = 0; step < 2; ++step) {
    // Offset and scaled, so the mean matters.
    Tensor x = random_input(shape, 10 + step), dy = random_input(shape, 20 + step);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 4.0f + 3.0f * x.f32()[i];
    ASSERT_TRUE(same_bits(local.bn.forward(x, *local_cache, ForwardContext()),
                          synced.forward(x, *synced_cache, ForwardContext())));
    ASSERT_TRUE(same_bits(local.bn.backward(dy, *local_cache, true),
                          synced.backward(dy, *synced_cache, true)));
  }
  EXPECT_TRUE(same_bits(local.params.grad(0), params.grad(0)));
  EXPECT_TRUE(same_bits(local.params.grad(1), params.grad(1)));
  EXPECT_TRUE(same_bits(local.bn.running_mean(), synced.running_mean()));
  EXPECT_TRUE(same_bits(local.bn.running_var(), synced.running_var()));
  EXPECT_EQ(synced.num_batches_tracked(), 2);
  EXPECT_EQ(reducer->gathers, 2);  // one call per train forward
  EXPECT_EQ(reducer->sums, 2);     // one per train backward that needs dx

  // Eval mode and a backward without dx communicate nothing.
  ForwardContext eval;
  eval.mode = Mode::eval;
  Tensor x = random_input(shape, 30);
  ASSERT_TRUE(
      same_bits(local.bn.forward(x, *local_cache, eval), synced.forward(x, *synced_cache, eval)));
  ASSERT_TRUE(
      same_bits(local.bn.backward(x, *local_cache, true), synced.backward(x, *synced_cache, true)));
  synced.forward(x, *synced_cache, ForwardContext());
  synced.backward(x, *synced_cache, false);
  EXPECT_EQ(reducer->gathers, 3);
  EXPECT_EQ(reducer->sums, 2);
}

TEST(BatchNorm, OneRankReducerIsBitwiseTheLocalLayer) {
  expect_one_rank_reducer_is_local<BatchNorm1d>({7, 5});
  expect_one_rank_reducer_is_local<BatchNorm2d>({3, 4, 5, 70});  // more than one channel block
}

}  // namespace
}  // namespace braid::nn
