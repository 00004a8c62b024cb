// Federated averaging's real round loop: Trainer::run_federated on each worker and
// serve_parameters on the server, as `braid train --strategy fedavg` runs them in a job
// (ranks as threads over the in-process transport), on clients holding unequal numbers of
// samples, against a reference built by hand: each client trained alone from the round's
// global model by a one-process model stepping through its batches, and the new global
// model the sample-weighted mean of theirs (McMahan et al. 2017, Algorithm 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "comm/group.h"
#include "comm/inproc_ranks.h"
#include "core/rng.h"
#include "data/client_split.h"
#include "parallel/fedavg_client.h"
#include "parallel/single_process.h"
#include "temp_dir.h"
#include "train/model_spec.h"
#include "train/ps_serve.h"
#include "train/strategy_setup.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;
using nlohmann::json;

constexpr int64_t kSide = 6, kRow = kSide * kSide, kClasses = 4;
constexpr int64_t kTrain = 48, kTest = 8;
constexpr int kClients = 3, kRounds = 2, kWorkers = 2;

// A .npy file (format 1.0) of `shape` holding `bytes` of type `descr`.
void write_npy(const std::string& path, const std::string& descr, const std::string& shape,
               const void* bytes, size_t size) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<uint16_t>(header.size());
  const char le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(le, 2);
  out << header;
  out.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
}

struct Arrays {
  std::vector<float> features;  // n x kRow
  std::vector<int32_t> labels;
};

Arrays random_arrays(int64_t n, uint64_t seed) {
  Arrays a;
  Rng rng(seed);
  for (int64_t i = 0; i < n * kRow; ++i) a.features.push_back(rng.normal());
  for (int64_t i = 0; i < n; ++i) a.labels.push_back(static_cast<int32_t>(rng.below(kClasses)));
  return a;
}

void write_arrays(const Arrays& a, const std::string& x, const std::string& y) {
  const auto n = static_cast<int64_t>(a.labels.size());
  write_npy(x, "<f4", "(" + std::to_string(n) + ", 6, 6, 1)", a.features.data(),
            a.features.size() * sizeof(float));
  write_npy(y, "<i4", "(" + std::to_string(n) + ",)", a.labels.data(),
            a.labels.size() * sizeof(int32_t));
}

// Plain FedAvg (server rate 1) with plain local SGD over a Dirichlet split: every client
// every round, batches of 4 with a partial last batch.
TrainConfig config(const TempDir& tmp) {
  const Arrays train = random_arrays(kTrain, 31), test = random_arrays(kTest, 32);
  write_arrays(train, tmp.file("x.npy"), tmp.file("y.npy"));
  write_arrays(test, tmp.file("tx.npy"), tmp.file("ty.npy"));
  TrainConfig c;
  c.model = json::parse(R"({"input": [6, 6, 1], "layers": [{"type": "flatten"},
      {"type": "linear", "out_features": 8}, {"type": "relu"},
      {"type": "linear", "out_features": 4}]})");
  c.dataset = "npy";
  c.npy = {tmp.file("x.npy"), tmp.file("y.npy"), tmp.file("tx.npy"), tmp.file("ty.npy")};
  c.npy_layout = "nhwc";  // the arrays are written [N, H, W, C]
  c.strategy = "fedavg";
  c.batch = 4;
  c.optimizer.name = "sgd";
  c.optimizer.lr = 0.2;
  c.optimizer.momentum = 0;
  c.optimizer.weight_decay = 0;
  c.schedule.name = "constant";
  c.fedavg.clients = kClients;
  c.fedavg.fraction = 1.0;
  c.fedavg.local_epochs = 1;
  c.fedavg.rounds = kRounds;
  c.fedavg.split = "dirichlet";
  c.fedavg.alpha = 0.5;
  c.seed = 5;
  c.eval_every = 1000;
  c.eval_batches = 1;
  c.log_every = 1000;
  c.out = tmp.file("out");
  return c;
}

// The global model after the job: worker 0's, pulled from the server as the run ends.
std::vector<float> federated_job(const TrainConfig& c) {
  std::vector<float> out;
  std::mutex mu;
  const parallel::PsLayout layout{kWorkers, 1};
  comm::testing::rethrow_first(comm::testing::run_group(kWorkers + 1, [&](comm::Group& g) {
    auto world = g.split(0, g.rank());
    if (world->rank() >= kWorkers) {
      serve_parameters(c, world, layout, world->rank() - kWorkers);
      return;
    }
    Trainer t(c, world, layout);
    t.run();
    EXPECT_EQ(t.global_step(), kRounds);
    if (world->rank() == 0) {
      const std::lock_guard lock(mu);
      out.assign(t.params().params(), t.params().params() + t.params().size());
    }
  }));
  return out;
}

// Rows `idx` of the training arrays as one batch.
data::Batch rows_of(const Arrays& a, std::span<const int64_t> idx) {
  const auto n = static_cast<int64_t>(idx.size());
  data::Batch b;
  b.size = n;
  b.inputs = Tensor::empty(Shape{n, kSide, kSide, 1});
  b.targets = Tensor::empty(Shape{n}, DType::i32);
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(b.inputs.f32() + j * kRow, a.features.data() + idx[j] * kRow, kRow * sizeof(float));
    b.targets.data<int32_t>()[j] = a.labels[static_cast<size_t>(idx[j])];
  }
  return b;
}

float largest(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

float max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Two rounds of three clients over two workers. The job sums the clients' n_k (w_k - w) in
// another order (a worker's accumulator, then the server's sum over workers) than the
// hand loop: float rounding, 1e-5 of the largest parameter. Weighting each client alike
// (the mean of the w_k, or sum n_k (w_k - w) over the client count) moves the model by
// far more, since the clients' sample counts differ.
TEST(FedAvgRounds, JobEqualsTheSampleWeightedMeanOfClientsTrainedAlone) {
  const TempDir tmp;
  const TrainConfig c = config(tmp);
  const Arrays train = random_arrays(kTrain, 31);
  data::ClientSplitSpec spec;
  spec.kind = data::ClientSplitKind::dirichlet;
  spec.alpha = c.fedavg.alpha;
  spec.seed = c.seed;
  const std::vector<std::vector<int64_t>> clients =
      data::split_clients(train.labels, kClasses, kClients, spec);
  std::vector<int64_t> sizes;
  for (const auto& k : clients) sizes.push_back(static_cast<int64_t>(k.size()));
  ASSERT_TRUE(sizes[0] != sizes[1] || sizes[1] != sizes[2]) << "the clients' shares are equal";

  const parallel::StepOptions o = step_options(c);
  const auto lr = static_cast<float>(c.optimizer.lr);
  std::vector<float> global;
  {
    parallel::SingleProcess start(build_model(c.model).module, o);
    global.assign(start.params().params(), start.params().params() + start.params().size());
  }
  std::vector<float> unweighted;  // the same rounds' mean over clients, each weighing 1
  for (int64_t r = 0; r < kRounds; ++r) {
    std::vector<double> weighted_sum(global.size(), 0), plain_sum(global.size(), 0);
    double samples = 0;
    for (int k = 0; k < kClients; ++k) {
      parallel::SingleProcess client(build_model(c.model).module, o);
      float* w = client.params().params();
      std::copy(global.begin(), global.end(), w);
      std::vector<int64_t> order = clients[static_cast<size_t>(k)];
      parallel::shuffle_client_epoch(c.seed, r, k, 0, order);
      const auto n = static_cast<int64_t>(order.size());
      for (int64_t b = 0; b < n; b += c.batch)
        client.step(rows_of(train, std::span(order).subspan(b, std::min(c.batch, n - b))), lr, 0);
      for (size_t i = 0; i < global.size(); ++i) {
        weighted_sum[i] += static_cast<double>(n) * w[i];
        plain_sum[i] += w[i];
      }
      samples += static_cast<double>(n);
    }
    unweighted.resize(global.size());
    for (size_t i = 0; i < global.size(); ++i) {
      unweighted[i] = static_cast<float>(plain_sum[i] / kClients);
      global[i] = static_cast<float>(weighted_sum[i] / samples);
    }
  }

  const std::vector<float> got = federated_job(c);
  ASSERT_EQ(got.size(), global.size());
  const float tol = 1e-5f * largest(global);
  ASSERT_GT(max_difference(global, unweighted), 100 * tol)
      << "weighting by samples and by clients hardly differ here";
  for (size_t i = 0; i < global.size(); ++i)
    ASSERT_NEAR(got[i], global[i], tol) << "parameter float " << i;
}

}  // namespace
}  // namespace braid::train
