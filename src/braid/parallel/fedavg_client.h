// One client's local training in a round of federated averaging, with no communication:
// the part of McMahan et al. 2017 ("Communication-efficient learning of deep networks from
// decentralized data", Algorithm 1, ClientUpdate) that runs where the client's data is.
// From the global model w, the client runs E epochs of minibatch SGD over its n_k samples
// (batches of B, reshuffled each epoch, the last batch of an epoch partial: ceil(n_k / B)
// steps per epoch), reaching w_k, and reports n_k (w_k - w) and n_k; the server divides the
// sum by sum_k n_k (server_optimizer.h).
//
// FedProx (Li et al. 2020, "Federated optimization in heterogeneous networks") adds the
// proximal term mu/2 ||w_k - w||^2 to the local objective: its gradient mu (w_k - w) is
// added to the loss gradient before each local step (and before clipping). mu = 0 is FedAvg.
//
// The model is a Strategy's (its module, flat ParamSet and StepOptions), so a
// parameter-server worker trains its clients on the very parameters it pulls into and
// evaluates. train() expects the model to hold the global model on entry and leaves it
// holding exactly that again (parameters and buffers, bit for bit): a worker trains its
// clients one after another from one pull. The strategy's own optimizer is not stepped
// and its "range is final" listeners do not fire: the client runs forward and backward
// itself and steps an optimizer of its own, built from the StepOptions' (which must be
// sgd: momentum, nesterov and weight decay as set; the learning rate comes with each
// call). That optimizer's state is reset at the start of every client's round, as in the
// paper, where a client keeps nothing between rounds.
//
// BatchNorm's running statistics are named buffers, not flat parameters: with a
// buffer_delta span, n_k (b_k - b) of the f32 buffers is added there too (concatenated in
// ParamSet::buffers() order, buffer_floats() in all), for the caller to average like the
// parameters; either way the buffers are put back on return. Integer buffers
// (num_batches_tracked) are put back and not reported.
//
// Randomness is a function of (StepOptions::seed, round, client): each epoch's order
// (shuffle_client_epoch), the forward randomness (dropout) of each local step, and the
// augmentation of each sample (keyed by its index in the dataset and the epoch round * E +
// e). So a client's update is the same bits whichever worker trains it and in whatever
// order. Batches are filled on the calling thread into two tensors allocated once; every
// buffer is sized at construction and reused across clients and rounds (the shuffled order
// grows to the largest client seen). Not thread-safe: one thread (the worker's compute
// thread) calls it, and nothing else may use the model meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/memory.h"
#include "data/dataset.h"
#include "parallel/strategy.h"

namespace braid::parallel {

// The Rng stream of a client's local randomness, or'ed with the round: apart from the
// round's pick (kFedAvgRoundStream = 1 << 60, fedavg_round.h) and the data streams
// (1 << 61 .. 1 << 63). The client and then the purpose (0: shuffle, 1: forward) are forks.
inline constexpr uint64_t kFedAvgLocalStream = 1ull << 59;

struct FedAvgClientOptions {
  int64_t batch = 64;              // B: the config's `batch`, the local batch size
  int64_t local_epochs = 1;        // E: fedavg.local_epochs
  float prox_mu = 0;               // fedavg.prox_mu: FedProx's mu, >= 0 (0: FedAvg)
  data::AugmentOptions augment{};  // as the training loader's
};

// What one client's round produced besides its delta.
struct ClientUpdate {
  int64_t samples = 0;  // n_k, the weight its delta was scaled by
  int64_t steps = 0;    // local optimizer steps: E * ceil(n_k / B)
  double loss = 0;      // mean training loss over every sample of every local epoch
};

// Client `client`'s order of its samples in local epoch `epoch` of round `round`: `order`,
// holding the client's indices in their given order, is shuffled in place (Fisher-Yates,
// from Rng(seed, kFedAvgLocalStream | round).fork(client).fork(0).fork(epoch)). Each epoch
// starts again from the given order, so an epoch's order does not depend on the others.
void shuffle_client_epoch(uint64_t seed, int64_t round, int client, int64_t epoch,
                          std::span<int64_t> order);

class FedAvgClient {
 public:
  // `model` and `data` (the training set the clients' index lists refer to) must outlive
  // this object. Errors name the config key: batch, fedavg.local_epochs, fedavg.prox_mu,
  // optimizer.name (sgd only), accumulate_steps (1 only), and a data/model mismatch.
  FedAvgClient(Strategy& model, std::shared_ptr<const data::Source> data,
               FedAvgClientOptions options);
  ~FedAvgClient();
  FedAvgClient(const FedAvgClient&) = delete;
  FedAvgClient& operator=(const FedAvgClient&) = delete;

  // Trains client `client` (>= 0) in round `round` (>= 0) on the samples `indices` of the
  // data (non-empty; the client's list from data::split_clients) at learning rate `lr`,
  // starting from the model's current parameters w. Adds n_k (w_k - w) into `delta`
  // (params().size() floats, padding included) and, when given, n_k (b_k - b) into
  // `buffer_delta` (buffer_floats() floats). Allocates nothing once the order vector has
  // grown to the client's size. When it throws, the model holds w again and the
  // accumulators are unchanged.
  ClientUpdate train(int64_t round, int client, std::span<const int64_t> indices, float lr,
                     std::span<float> delta, std::span<float> buffer_delta = {});

  // Floats of the model's f32 buffers (BatchNorm's running mean and variance), the size of
  // train()'s buffer_delta.
  int64_t buffer_floats() const { return buffer_floats_; }
  const FedAvgClientOptions& options() const { return options_; }

 private:
  // One local step on rows [begin, begin + rows) of order_; returns the batch's mean loss.
  double local_step(int64_t begin, int64_t rows, const data::FillContext& fill, const Rng& rng,
                    float lr);
  void reset_optimizer();
  ClientUpdate run_epochs(int64_t round, int client, std::span<const int64_t> indices, float lr);
  void save_global();     // the model's parameters and buffers into global_ and buffers_
  void restore_global();  // and back
  void report(float weight, std::span<float> delta, std::span<float> buffer_delta);

  Strategy& model_;
  std::shared_ptr<const data::Source> data_;
  FedAvgClientOptions options_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<float*> optimizer_state_;  // its float state, zeroed per client
  std::vector<int64_t> optimizer_state_floats_;
  std::unique_ptr<nn::Cache> cache_;
  Tensor inputs_, targets_, dlogits_;  // inputs_ and targets_: B rows, filled per step
  std::vector<data::SampleRef> refs_;  // B entries
  std::vector<int64_t> order_;         // the client's indices, shuffled per epoch
  Buffer global_;                      // w: the parameters on entry to train()
  Buffer buffers_;                     // every named buffer's bytes on entry to train()
  int64_t buffer_floats_ = 0;
};

}  // namespace braid::parallel
