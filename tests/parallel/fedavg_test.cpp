// Federated averaging's pieces (fedavg_round, fedavg_client, server_optimizer) put together
// as a parameter-server job calls them, against references built from one-process models:
// the closed form of FedAvg with one local step (a full-batch step on the union of the
// shards), hand loops of local SGD with and without FedProx's proximal term, and the
// client's promises (the model left as found, an update independent of who trains it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "data/client_split.h"
#include "data/sources.h"
#include "parallel/fedavg_client.h"
#include "parallel/fedavg_round.h"
#include "parallel/server_optimizer.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"

namespace braid::parallel {
namespace {

using namespace braid::parallel::testing;  // NOLINT: the shared test data
using Clients = std::vector<std::vector<int64_t>>;

constexpr int64_t kRow = 12 * 12;  // floats of one 12x12x1 sample

// n samples shaped like the test models' inputs, with labels, from the seed.
std::shared_ptr<const data::ArrayDataset> synthetic(int64_t n) {
  auto d = std::make_shared<data::ArrayDataset>();
  d->features = Tensor::empty(Shape{n, 12, 12, 1});
  d->labels = Tensor::empty(Shape{n}, DType::i32);
  d->num_classes = 10;
  Rng rng(77);
  for (int64_t i = 0; i < d->features.numel(); ++i) d->features.f32()[i] = rng.normal();
  for (int64_t i = 0; i < n; ++i)
    d->labels.data<int32_t>()[i] = static_cast<int32_t>(rng.below(10));
  return d;
}

std::span<const int32_t> labels(const data::ArrayDataset& d) {
  return {d.labels.data<int32_t>(), static_cast<size_t>(d.size())};
}

// The samples `idx` of `d`, in that order, as one batch.
data::Batch rows_of(const data::ArrayDataset& d, std::span<const int64_t> idx) {
  const auto n = static_cast<int64_t>(idx.size());
  data::Batch b;
  b.size = n;
  b.inputs = Tensor::empty(Shape{n, 12, 12, 1});
  b.targets = Tensor::empty(Shape{n}, DType::i32);
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(b.inputs.f32() + j * kRow, d.features.f32() + idx[j] * kRow, kRow * sizeof(float));
    b.targets.data<int32_t>()[j] = d.labels.data<int32_t>()[idx[j]];
  }
  return b;
}

StepOptions sgd(float momentum, float weight_decay) {
  StepOptions o = options("sgd");
  o.optimizer.momentum = momentum;
  o.optimizer.weight_decay = weight_decay;
  return o;
}

std::unique_ptr<SingleProcess> model(const json& spec, const StepOptions& o) {
  return std::make_unique<SingleProcess>(train::build_model(spec).module, o);
}

std::vector<optim::Segment> segments_of(const nn::ParamSet& params) {
  std::vector<optim::Segment> out;
  for (const auto& p : params.layout()) out.push_back({p.name, p.offset, p.numel(), p.decay});
  return out;
}

std::vector<int64_t> sizes_of(const Clients& clients) {
  std::vector<int64_t> out;
  for (const auto& c : clients) out.push_back(static_cast<int64_t>(c.size()));
  return out;
}

struct Federation {
  int rounds = 1;
  double fraction = 1.0;
  int workers = 1;
  float lr = 0.1f;
};

// `f.rounds` rounds through the pieces as a parameter-server job calls them: each round's
// clients dealt to the workers; each worker (a model of its own, as a process has) loads
// the global model, trains its clients one after another into its own accumulator; the
// server sums the workers' accumulators in worker order and steps plain FedAvg.
std::vector<float> federated(const json& spec, const StepOptions& o, FedAvgClientOptions c,
                             const std::shared_ptr<const data::ArrayDataset>& d,
                             const Clients& clients, const Federation& f) {
  auto source = std::make_shared<data::ArraySource>(d);
  std::vector<std::unique_ptr<SingleProcess>> models;
  std::vector<std::unique_ptr<FedAvgClient>> workers;
  for (int w = 0; w < f.workers; ++w) {
    models.push_back(model(spec, o));
    workers.push_back(std::make_unique<FedAvgClient>(*models.back(), source, c));
  }
  std::vector<float> global = params_of(*models[0]);
  ServerOptimizer server({}, static_cast<int64_t>(global.size()));
  const auto K = static_cast<int>(clients.size());
  for (int r = 0; r < f.rounds; ++r) {
    const auto deal =
        assign_clients(choose_clients(o.seed, r, K, f.fraction), sizes_of(clients), f.workers);
    std::vector<float> sum(global.size(), 0.0f);
    double total = 0;
    for (int w = 0; w < f.workers; ++w) {
      std::copy(global.begin(), global.end(), models[w]->params().params());  // the pull
      std::vector<float> acc(global.size(), 0.0f);
      for (const int k : deal[w]) total += workers[w]->train(r, k, clients[k], f.lr, acc).samples;
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += acc[i];
    }
    server.step(global, sum, total);
  }
  return global;
}

// The same rounds by hand, one client at a time in ascending order: a fresh one-process
// model (fresh optimizer state) from the global model steps through the client's batches
// as shuffle_client_epoch orders them; with mu > 0 each step instead takes the plain
// gradient (a step at learning rate 0), adds mu (w - w_global) and steps an SGD optimizer
// of its own with that (the library's kernel: compiled with FMA where the machine has it,
// so a hand-written w -= lr g' would round differently).
std::vector<float> by_hand(const json& spec, const StepOptions& o, FedAvgClientOptions c,
                           const data::ArrayDataset& d, const Clients& clients,
                           const Federation& f) {
  std::vector<float> global = params_of(*model(spec, o));
  const auto K = static_cast<int>(clients.size());
  for (int r = 0; r < f.rounds; ++r) {
    std::vector<float> sum(global.size(), 0.0f);
    double total = 0;
    for (const int k : choose_clients(o.seed, r, K, f.fraction)) {
      auto s = model(spec, o);
      float* w = s->params().params();
      std::copy(global.begin(), global.end(), w);
      std::vector<float> grad(global.size());
      const auto prox_sgd =
          optim::make_optimizer(o.optimizer, segments_of(s->params()), s->params().size());
      const auto n = static_cast<int64_t>(clients[k].size());
      for (int64_t e = 0; e < c.local_epochs; ++e) {
        std::vector<int64_t> order = clients[k];
        shuffle_client_epoch(o.seed, r, k, e, order);
        for (int64_t b = 0; b < n; b += c.batch) {
          const data::Batch batch =
              rows_of(d, std::span(order).subspan(b, std::min(c.batch, n - b)));
          if (c.prox_mu == 0) {
            s->step(batch, f.lr, 0);
            continue;
          }
          s->step(batch, 0.0f, 0);
          const float* g = s->params().grads();
          for (size_t i = 0; i < global.size(); ++i)
            grad[i] = g[i] + c.prox_mu * (w[i] - global[i]);
          prox_sgd->step(w, grad.data(), f.lr);
        }
      }
      for (size_t i = 0; i < global.size(); ++i)
        sum[i] += static_cast<float>(n) * (w[i] - global[i]);
      total += static_cast<double>(n);
    }
    const auto inv = static_cast<float>(1.0 / total);
    for (size_t i = 0; i < global.size(); ++i) global[i] += 1.0f * (sum[i] * inv);
  }
  return global;
}

float max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// FedAvg with E = 1, B = the shard, full participation and equal shards of n: every client
// takes one step w - lr g_k, and the server's mean of n (w_k - w) / (K n) is -lr mean_k g_k,
// the full-batch gradient of the union: one plain SGD step of one process over all K n
// samples. (small_mlp: batch norm and dropout would make a shard's gradient depend on the
// rest of its batch.) Only float rounding differs: the gradient's sums over 16 rows
// against 64, w_k - w and the weighted sum of K = 4 deltas, each within a few ulps of the
// largest parameter: 1e-6 of it is ~16 ulps. The step itself moves parameters by over
// 1e3 times that, so a client on the wrong shard, a wrong weight or a missed client fails.
TEST(FedAvg, OneLocalStepOnEqualShardsIsOneFullBatchStep) {
  const int K = 4;
  const int64_t n = 16;
  const auto d = synthetic(K * n);
  const Clients clients = data::split_clients(labels(*d), 10, K, {.seed = 3});
  for (const auto& c : clients) ASSERT_EQ(static_cast<int64_t>(c.size()), n);
  const StepOptions o = sgd(0, 0);
  const Federation f{.rounds = 1, .fraction = 1.0, .workers = 2, .lr = 0.5f};
  const std::vector<float> got =
      federated(small_mlp(), o, {.batch = n, .local_epochs = 1}, d, clients, f);

  auto one = model(small_mlp(), o);
  const std::vector<float> before = params_of(*one);
  std::vector<int64_t> all(static_cast<size_t>(K * n));
  std::iota(all.begin(), all.end(), 0);
  one->step(rows_of(*d, all), f.lr, 0);
  const std::vector<float> want = params_of(*one);

  const float tol = 1e-6f * largest(want);
  ASSERT_GT(max_difference(want, before), 1000 * tol) << "the step hardly moved the model";
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "float " << i;
}

// Unequal shards (a Dirichlet split), two of three clients a round, E = 2 epochs of
// batches of 4 with a partial last batch, momentum and weight decay: the pieces do the same
// operations in the same order as the hand loop (one worker, clients ascending), so the
// same bits.
TEST(FedAvg, SeveralLocalStepsEqualTheHandLoop) {
  const int K = 3;
  const auto d = synthetic(60);
  const Clients clients = data::split_clients(
      labels(*d), 10, K, {.kind = data::ClientSplitKind::dirichlet, .alpha = 0.5, .seed = 4});
  const auto sizes = sizes_of(clients);
  ASSERT_TRUE(sizes[0] != sizes[1] || sizes[1] != sizes[2]) << "the shards are equal";
  const StepOptions o = sgd(0.9f, 0.01f);
  const FedAvgClientOptions c{.batch = 4, .local_epochs = 2};
  const Federation f{.rounds = 3, .fraction = 2.0 / 3.0, .workers = 1, .lr = 0.05f};
  const std::vector<float> got = federated(small_mlp(), o, c, d, clients, f);
  expect_bitwise(got, by_hand(small_mlp(), o, c, *d, clients, f), "FedAvg against the hand loop");
  EXPECT_GT(max_difference(got, params_of(*model(small_mlp(), o))), 1e-3f);
}

// More workers change only the order of the server's sum (each worker's accumulator
// first): within float rounding of the one-worker result.
TEST(FedAvg, WorkersChangeOnlyTheOrderOfTheSum) {
  const int K = 5;
  const auto d = synthetic(50);
  const Clients clients = data::split_clients(
      labels(*d), 10, K,
      {.kind = data::ClientSplitKind::labels_per_client, .labels_per_client = 2, .seed = 1});
  const StepOptions o = sgd(0.9f, 0);
  const FedAvgClientOptions c{.batch = 3, .local_epochs = 1};
  const Federation f{.rounds = 2, .fraction = 0.8, .workers = 1, .lr = 0.05f};
  const std::vector<float> one = federated(small_mlp(), o, c, d, clients, f);
  for (int workers : {2, 3, 7}) {
    Federation fw = f;
    fw.workers = workers;
    const std::vector<float> got = federated(small_mlp(), o, c, d, clients, fw);
    const float tol = 1e-6f * largest(one);
    for (size_t i = 0; i < one.size(); ++i)
      ASSERT_NEAR(got[i], one[i], tol) << workers << " workers, float " << i;
  }
}

// FedProx: the proximal gradient mu (w - w_global) joins every local step's gradient. The
// hand loop adds it to the plain gradient itself; the result must match it bit for bit,
// differ from mu = 0 by far more than rounding, and stay closer to the starting model.
TEST(FedAvg, FedProxAddsTheProximalGradientToEveryLocalStep) {
  const int K = 3;
  const auto d = synthetic(45);
  const Clients clients = data::split_clients(
      labels(*d), 10, K, {.kind = data::ClientSplitKind::dirichlet, .alpha = 1.0, .seed = 9});
  const StepOptions o = sgd(0, 0);
  const Federation f{.rounds = 2, .fraction = 1.0, .workers = 1, .lr = 0.1f};
  const FedAvgClientOptions prox{.batch = 5, .local_epochs = 2, .prox_mu = 0.5f};
  const std::vector<float> got = federated(small_mlp(), o, prox, d, clients, f);
  expect_bitwise(got, by_hand(small_mlp(), o, prox, *d, clients, f), "FedProx, hand loop");

  FedAvgClientOptions plain = prox;
  plain.prox_mu = 0;
  const std::vector<float> fedavg = federated(small_mlp(), o, plain, d, clients, f);
  const std::vector<float> start = params_of(*model(small_mlp(), o));
  EXPECT_GT(max_difference(got, fedavg), 1e-4f * largest(fedavg));
  double drift_prox = 0, drift_plain = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    drift_prox += std::pow(got[i] - start[i], 2);
    drift_plain += std::pow(fedavg[i] - start[i], 2);
  }
  EXPECT_LT(drift_prox, drift_plain) << "the proximal term did not hold the clients back";
}

// train() leaves the model as it found it (parameters and batch norm's buffers, bit for
// bit), and a client's update does not depend on what the worker trained before it.
TEST(FedAvg, ClientLeavesTheModelAsFoundAndItsUpdateIsItsOwn) {
  const auto d = synthetic(40);
  const Clients clients = data::split_clients(labels(*d), 10, 2, {.seed = 2});
  auto source = std::make_shared<data::ArraySource>(d);
  auto s = model(small_cnn(), sgd(0.9f, 0));
  FedAvgClient client(*s, source, {.batch = 6, .local_epochs = 2});
  ASSERT_GT(client.buffer_floats(), 0);
  const std::vector<float> before = params_of(*s);
  std::vector<std::vector<float>> buffers_before;
  for (const auto& b : s->params().buffers())
    if (b.value.dtype() == DType::f32)
      buffers_before.emplace_back(b.value.f32(), b.value.f32() + b.value.numel());

  const auto P = static_cast<size_t>(s->params().size());
  const auto Bf = static_cast<size_t>(client.buffer_floats());
  // Client 1 alone, then client 0 and client 1 again into fresh accumulators.
  std::vector<float> alone(P), alone_buffers(Bf), first(P), first_buffers(Bf), again(P),
      again_buffers(Bf);
  const ClientUpdate u = client.train(7, 1, clients[1], 0.05f, alone, alone_buffers);
  client.train(7, 0, clients[0], 0.05f, first, first_buffers);
  client.train(7, 1, clients[1], 0.05f, again, again_buffers);
  expect_bitwise(params_of(*s), before, "parameters after train()");
  size_t k = 0;
  for (const auto& b : s->params().buffers())
    if (b.value.dtype() == DType::f32)
      expect_bitwise({b.value.f32(), b.value.f32() + b.value.numel()}, buffers_before[k++],
                     b.name.c_str());
  expect_bitwise(again, alone, "client 1's delta after client 0");
  expect_bitwise(again_buffers, alone_buffers, "client 1's buffer delta after client 0");
  EXPECT_GT(largest(alone), 0.0f);
  EXPECT_GT(largest(alone_buffers), 0.0f) << "batch norm's running statistics did not move";
  EXPECT_NE(first, alone);
  EXPECT_EQ(u.samples, static_cast<int64_t>(clients[1].size()));
  EXPECT_EQ(u.steps, 2 * ((u.samples + 5) / 6));
  EXPECT_GT(u.loss, 0.0);
}

// A source that fails on one sample, as a corrupt file would.
class FailingSource : public data::ArraySource {
 public:
  using ArraySource::ArraySource;
  void fill(std::span<const data::SampleRef> samples, const data::FillContext& ctx, Tensor& x,
            Tensor& y) const override {
    for (const auto& s : samples) BRAID_CHECK(s.index != 13, "sample 13 is unreadable");
    ArraySource::fill(samples, ctx, x, y);
  }
};

// A client that fails mid-round (after local steps) leaves the model and the accumulator
// as they were: the worker can report the error with its global model intact.
TEST(FedAvg, ClientThatFailsLeavesTheModelAsFound) {
  auto s = model(small_mlp(), sgd(0, 0));
  FedAvgClient client(*s, std::make_shared<FailingSource>(synthetic(20)), {.batch = 2});
  const std::vector<float> before = params_of(*s);
  std::vector<float> acc(before.size(), 0.0f);
  std::vector<int64_t> all(20);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_THROW(client.train(0, 0, all, 0.1f, acc), Error);
  expect_bitwise(params_of(*s), before, "parameters after a failed train()");
  EXPECT_EQ(largest(acc), 0.0f);
}

// Each (round, client, epoch) shuffles its own way, and every order is a permutation.
TEST(FedAvg, LocalOrderIsSeededByRoundClientAndEpoch) {
  std::vector<int64_t> base(50);
  std::iota(base.begin(), base.end(), 100);
  const auto order = [&](uint64_t seed, int64_t round, int client, int64_t epoch) {
    std::vector<int64_t> v = base;
    shuffle_client_epoch(seed, round, client, epoch, v);
    return v;
  };
  const auto ref = order(1, 2, 3, 0);
  EXPECT_EQ(ref, order(1, 2, 3, 0));
  EXPECT_NE(ref, base);
  for (const auto& other :
       {order(2, 2, 3, 0), order(1, 3, 3, 0), order(1, 2, 4, 0), order(1, 2, 3, 1)}) {
    EXPECT_NE(other, ref);
    EXPECT_TRUE(std::is_permutation(other.begin(), other.end(), base.begin()));
  }
}

TEST(FedAvg, BadClientSettingsAreRefusedNamingTheKey) {
  auto source = std::make_shared<data::ArraySource>(synthetic(8));
  const auto refused = [&](const StepOptions& o, FedAvgClientOptions c, const char* key) {
    auto s = model(small_mlp(), o);
    try {
      FedAvgClient client(*s, source, c);
      ADD_FAILURE() << key << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  refused(sgd(0, 0), {.batch = 0}, "batch");
  refused(sgd(0, 0), {.local_epochs = 0}, "fedavg.local_epochs");
  refused(sgd(0, 0), {.prox_mu = -1}, "fedavg.prox_mu");
  refused(options("adam"), {}, "optimizer.name");
  StepOptions accumulate = sgd(0, 0);
  accumulate.accumulate_steps = 2;
  refused(accumulate, {}, "accumulate_steps");

  auto s = model(small_mlp(), sgd(0, 0));
  FedAvgClient client(*s, source, {.batch = 4});
  std::vector<float> acc(static_cast<size_t>(s->params().size()));
  const std::vector<int64_t> none, outside{3, 8};
  EXPECT_THROW(client.train(0, 0, none, 0.1f, acc), Error);
  EXPECT_THROW(client.train(0, 0, outside, 0.1f, acc), Error);
  std::vector<float> short_acc(acc.size() - 1);
  EXPECT_THROW(client.train(0, 0, std::vector<int64_t>{1, 2}, 0.1f, short_acc), Error);
}

}  // namespace
}  // namespace braid::parallel
