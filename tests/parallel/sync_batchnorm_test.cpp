// SyncBatchNorm: N ranks (threads over the in-process transport), each holding a shard of
// one batch, against one BatchNorm over the whole batch: forward output, dx, the weight
// and bias gradients (summed over ranks, as the gradient allreduce does) and the running
// statistics; then the cnn-bn model, whose averaged gradients on two ranks must equal one
// process's step on the full batch.
//
// Tolerances. Both sides accumulate every per-channel sum in double and round to float
// once; they differ only in the order of the double additions (per shard, then merged),
// so mean, invstd and the dx coefficients agree to an ulp at worst, and the outputs and
// dx came out bitwise equal when this was written. The weight and bias gradients are
// float sums of per-rank float sums (the gradient allreduce's order), a few ulps apart:
// 3e-7 of the largest value at most; the model's gradients, through GEMMs and softmax,
// 1e-6. kRelTol = 1e-5 of the tensor's largest value leaves 10x over that, and is far
// below what local statistics would give (see LocalStatisticsWouldFail).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/inproc_ranks.h"
#include "comm/progress_engine.h"
#include "nn/batchnorm.h"
#include "nn/loss.h"
#include "parallel/group_stats_reducer.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;

constexpr double kRelTol = 1e-5;

std::vector<float> copy_of(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// |got - want| <= tol * max(max|want|, floor) elementwise; reports the first miss.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what, double floor = 0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = floor;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], kRelTol * scale) << what << " [" << i << "] of " << got.size();
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float offset, float spread) {
  Rng rng(seed);
  Tensor t = Tensor::empty(shape);
  // Per-channel offsets too, so every channel has its own mean and variance.
  const int64_t C = shape[-1];
  for (int64_t i = 0; i < t.numel(); ++i) {
    const auto c = static_cast<float>(i % C);
    t.f32()[i] = offset + 0.5f * c + (spread + 0.25f * c) * rng.normal();
  }
  return t;
}

// A BatchNorm with non-trivial weight and bias, the same on every rank (seeded).
struct Layer {
  nn::BatchNorm bn;
  nn::ParamSet params;
  Layer(int64_t C, int spatial_dims, std::shared_ptr<nn::StatsReducer> reducer)
      : bn(C, spatial_dims, std::move(reducer)) {
    bn.declare(params, "bn.");
    params.allocate();
    Rng rng(2);
    bn.init(rng);
    for (int64_t c = 0; c < C; ++c) {
      params.param(0).f32()[c] = 1.0f + 0.3f * rng.normal();
      params.param(1).f32()[c] = 0.5f * rng.normal();
    }
    params.zero_grads();
  }
};

// What one layer gives for a batch after `steps` forward/backward passes (the last one's
// output and dx; gradients and running statistics accumulated over all of them).
struct Result {
  std::vector<float> out, dx, dweight, dbias, running_mean, running_var;
  int64_t batches = 0;
};

void run_steps(Layer& l, const std::vector<Tensor>& xs, const std::vector<Tensor>& dys, Result& r) {
  auto cache = l.bn.make_cache();
  for (size_t s = 0; s < xs.size(); ++s) {
    r.out = copy_of(l.bn.forward(xs[s], *cache, nn::ForwardContext()));
    r.dx = copy_of(l.bn.backward(dys[s], *cache, true));
  }
  r.dweight = copy_of(l.params.grad(0));
  r.dbias = copy_of(l.params.grad(1));
  r.running_mean = copy_of(l.bn.running_mean());
  r.running_var = copy_of(l.bn.running_var());
  r.batches = l.bn.num_batches_tracked();
}

struct Case {
  Shape sample;  // one sample, channels last: [C] or [H, W, C]
  std::vector<int64_t> shards;
  float offset = 3.0f, spread = 2.0f;
  // Reduce through a ProgressEngine (as under DDP), behind an allreduce already queued.
  bool engine = false;
};

// Runs `c` on shards.size() ranks and on one layer over the concatenated batch, for two
// steps (the running statistics see two updates), and compares.
void expect_sync_equals_full_batch(const Case& c) {
  const int ranks = static_cast<int>(c.shards.size());
  const int64_t B = std::accumulate(c.shards.begin(), c.shards.end(), int64_t{0});
  const int64_t C = c.sample[-1];
  const int spatial = c.sample.rank() == 1 ? 0 : 2;
  std::vector<int64_t> dims{B};
  for (int i = 0; i < c.sample.rank(); ++i) dims.push_back(c.sample[i]);
  const Shape shape(dims);
  std::vector<Tensor> xs, dys;
  for (uint64_t s = 0; s < 2; ++s) {
    xs.push_back(random_tensor(shape, 100 + s, c.offset, c.spread));
    dys.push_back(random_tensor(shape, 200 + s, 0.1f, 1.0f));
  }

  Layer full(C, spatial, nullptr);
  Result want;
  run_steps(full, xs, dys, want);

  std::vector<int64_t> begin(c.shards.size() + 1, 0);
  std::partial_sum(c.shards.begin(), c.shards.end(), begin.begin() + 1);
  std::vector<Result> got(static_cast<size_t>(ranks));
  rethrow_first(run_group(ranks, [&](comm::Group& g) {
    const auto r = static_cast<size_t>(g.rank());
    auto group = g.split(0, g.rank());
    auto reducer = std::make_shared<GroupStatsReducer>(group);
    Layer l(C, spatial, reducer);
    std::vector<Tensor> x, dy;
    for (size_t s = 0; s < xs.size(); ++s) {
      x.push_back(xs[s].slice_rows(begin[r], begin[r + 1]));
      dy.push_back(dys[s].slice_rows(begin[r], begin[r + 1]));
    }
    if (!c.engine) return run_steps(l, x, dy, got[r]);
    comm::ProgressEngine engine(group);
    reducer->use_engine(&engine);
    float bucket = 1.0f;
    comm::Handle h = engine.iallreduce(&bucket, 1, DType::f32, ReduceOp::sum, "bucket");
    run_steps(l, x, dy, got[r]);
    h.wait();
    reducer->use_engine(nullptr);
    EXPECT_EQ(bucket, static_cast<float>(ranks));
  }));

  std::vector<float> out, dx, dweight(static_cast<size_t>(C)), dbias(static_cast<size_t>(C));
  for (const Result& r : got) {
    out.insert(out.end(), r.out.begin(), r.out.end());
    dx.insert(dx.end(), r.dx.begin(), r.dx.end());
    for (size_t i = 0; i < dweight.size(); ++i) dweight[i] += r.dweight[i], dbias[i] += r.dbias[i];
    // The statistics are merged from the same gathered bits on every rank.
    EXPECT_EQ(r.running_mean, got[0].running_mean);
    EXPECT_EQ(r.running_var, got[0].running_var);
    EXPECT_EQ(r.batches, 2);
  }
  expect_close(out, want.out, "output");
  expect_close(dx, want.dx, "dx");
  expect_close(dweight, want.dweight, "dweight");
  expect_close(dbias, want.dbias, "dbias");
  expect_close(got[0].running_mean, want.running_mean, "running_mean");
  expect_close(got[0].running_var, want.running_var, "running_var");
}

TEST(SyncBatchNorm, TwoRanksEqualTheConcatenatedBatch) {
  expect_sync_equals_full_batch({{3, 4, 6}, {4, 4}});  // BatchNorm2d, NHWC
  expect_sync_equals_full_batch({{3, 4, 6}, {3, 5}});  // uneven shards
  expect_sync_equals_full_batch({{6}, {3, 5}});        // BatchNorm1d
}

TEST(SyncBatchNorm, ThroughAProgressEngineAsUnderDdp) {
  Case c{{3, 4, 6}, {3, 5}};
  c.engine = true;
  expect_sync_equals_full_batch(c);
  c.shards = {2, 3, 1, 2};
  expect_sync_equals_full_batch(c);
}

TEST(SyncBatchNorm, FourRanksEqualTheConcatenatedBatch) {
  expect_sync_equals_full_batch({{2, 3, 5}, {2, 2, 2, 2}});
  expect_sync_equals_full_batch({{2, 3, 5}, {3, 1, 4, 2}});
  expect_sync_equals_full_batch({{5}, {2, 3, 1, 4}});         // one row on a rank is enough
  expect_sync_equals_full_batch({{2, 3, 70}, {3, 0, 4, 1}});  // an empty shard; 2 channel blocks
}

// The merge of per-rank moments keeps the local layer's precision where E[x^2] - E[x]^2
// would not: values near 1000 with spread 0.01.
TEST(SyncBatchNorm, StaysAccurateWhenTheMeanDwarfsTheSpread) {
  expect_sync_equals_full_batch({{4}, {700, 300, 24}, 1000.0f, 0.01f});
}

// Every rank fails at once, with the global count, when the whole batch has one row; none
// is left waiting for the others.
TEST(SyncBatchNorm, OneRowOnAllRanksTogetherIsAnErrorOnEveryRank) {
  const auto errors = run_group(2, [](comm::Group& g) {
    Layer l(3, 0, std::make_shared<GroupStatsReducer>(g.split(0, g.rank())));
    auto cache = l.bn.make_cache();
    l.bn.forward(random_tensor({g.rank() == 0 ? 1 : 0, 3}, 1, 0, 1), *cache, nn::ForwardContext());
  });
  for (const auto& e : errors) {
    const std::string what = comm::testing::message(e);
    EXPECT_NE(what.find("more than one value"), std::string::npos) << what;
    EXPECT_NE(what.find("1 rows on all 2 ranks"), std::string::npos) << what;
  }
}

// Without the reducer each shard would be normalised with its own statistics: the test's
// data make that differ from the full batch by far more than the tolerance, so the
// comparisons above do test the synchronisation.
TEST(SyncBatchNorm, LocalStatisticsWouldFail) {
  const Shape shape{8, 3, 4, 6};
  const Tensor x = random_tensor(shape, 100, 3.0f, 2.0f);
  Layer full(6, 2, nullptr), half(6, 2, nullptr);
  auto a = full.bn.make_cache(), b = half.bn.make_cache();
  const auto want = copy_of(full.bn.forward(x, *a, nn::ForwardContext()));
  const auto got = copy_of(half.bn.forward(x.slice_rows(0, 4), *b, nn::ForwardContext()));
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_GT(worst, 100 * kRelTol * scale);
}

// The built-in cnn-bn with the reducer in both BatchNorm layers: on 2 ranks with half the
// batch each, the loss averaged and the gradients allreduce-averaged equal one process's
// full-batch step. Dropout is set to p = 0: its masks are drawn per rank from the same
// stream, so a shard's mask is not the full batch's mask of those rows (a matter for the
// data-parallel strategy, not for the statistics).
TEST(SyncBatchNorm, CnnBnOnTwoRanksEqualsTheFullBatchStep) {
  nlohmann::json spec = train::builtin_model_spec("cnn-bn");
  for (auto& layer : spec["layers"])
    if (layer["type"] == "dropout") layer["p"] = 0.0;
  constexpr int64_t B = 8;
  const Tensor x = random_tensor({B, 28, 28, 1}, 7, 0.3f, 1.0f);
  Tensor labels = Tensor::empty({B}, DType::i32);
  for (int64_t i = 0; i < B; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);

  struct Step {
    double loss = 0;
    std::vector<std::vector<float>> grads;  // one per parameter, in layout order
    std::vector<float> running_mean;
  };
  auto step = [&](const train::ModelBuildOptions& options, int64_t begin, int64_t end,
                  comm::Group* average_over) {
    train::BuiltModel m = train::build_model(spec, 128, options);
    nn::ParamSet params;
    m.module->declare(params, "");
    params.allocate();
    Rng rng(11);
    m.module->init(rng);
    params.zero_grads();
    auto cache = m.module->make_cache();
    const Tensor& logits =
        m.module->forward(x.slice_rows(begin, end), *cache, nn::ForwardContext());
    Tensor dlogits;
    Step s;
    s.loss = nn::softmax_cross_entropy(logits, labels.slice_rows(begin, end), &dlogits).loss;
    m.module->backward(dlogits, *cache, false);
    float* g = params.grads();
    if (average_over) {
      comm::allreduce(*average_over, g, static_cast<size_t>(params.size()), DType::f32,
                      ReduceOp::avg);
      comm::allreduce(*average_over, &s.loss, 1, DType::f64, ReduceOp::avg);
    }
    for (const nn::ParamInfo& p : params.layout())
      s.grads.emplace_back(g + p.offset, g + p.offset + p.numel());
    s.running_mean = copy_of(params.buffers().at(0).value);  // 1.running_mean
    return s;
  };

  const Step want = step({}, 0, B, nullptr);
  std::vector<Step> got(2);
  rethrow_first(run_group(2, [&](comm::Group& g) {
    train::ModelBuildOptions options;
    options.batchnorm_reducer = std::make_shared<GroupStatsReducer>(g.split(0, g.rank()));
    got[static_cast<size_t>(g.rank())] =
        step(options, g.rank() * B / 2, (g.rank() + 1) * B / 2, &g);
  }));
  // The conv biases right before a BatchNorm have zero gradient in exact arithmetic (the
  // normalisation removes any per-channel constant): both sides hold rounding noise there,
  // so no parameter's scale counts for less than a tenth of the largest gradient's.
  double largest = 0;
  for (const auto& p : want.grads)
    for (float v : p) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  for (const Step& s : got) {
    EXPECT_NEAR(s.loss, want.loss, kRelTol * std::fabs(want.loss));
    ASSERT_EQ(s.grads.size(), want.grads.size());
    for (size_t p = 0; p < s.grads.size(); ++p)
      expect_close(s.grads[p], want.grads[p], "gradient " + std::to_string(p), largest / 10);
    expect_close(s.running_mean, want.running_mean, "running_mean");
    EXPECT_EQ(s.grads, got[0].grads);  // the allreduce leaves the same bits everywhere
  }
}

}  // namespace
}  // namespace braid::parallel
