#include "parallel/fedavg_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "nn/loss.h"
#include "optim/clip.h"

namespace braid::parallel {
namespace {

Rng client_rng(uint64_t seed, int64_t round, int client) {
  BRAID_CHECK(round >= 0 && static_cast<uint64_t>(round) < kFedAvgLocalStream, "fedavg: round ",
              round, " is out of range");
  BRAID_CHECK(client >= 0, "fedavg: client ", client, " is negative");
  return Rng(seed, kFedAvgLocalStream | static_cast<uint64_t>(round))
      .fork(static_cast<uint64_t>(client));
}

constexpr uint64_t kShufflePurpose = 0;
constexpr uint64_t kForwardPurpose = 1;

}  // namespace

void shuffle_client_epoch(uint64_t seed, int64_t round, int client, int64_t epoch,
                          std::span<int64_t> order) {
  Rng rng =
      client_rng(seed, round, client).fork(kShufflePurpose).fork(static_cast<uint64_t>(epoch));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
}

FedAvgClient::FedAvgClient(Strategy& model, std::shared_ptr<const data::Source> data,
                           FedAvgClientOptions options)
    : model_(model), data_(std::move(data)), options_(options) {
  BRAID_CHECK(data_, "fedavg: a client needs a training set");
  BRAID_CHECK(options_.batch >= 1, "batch is ", options_.batch,
              "; a client's local batch needs at least one sample");
  BRAID_CHECK(options_.local_epochs >= 1, "fedavg.local_epochs is ", options_.local_epochs,
              "; a client trains at least one epoch per round");
  BRAID_CHECK(std::isfinite(options_.prox_mu) && options_.prox_mu >= 0.0f, "fedavg.prox_mu is ",
              options_.prox_mu, "; FedProx's mu must be finite and >= 0 (0: plain FedAvg)");
  const StepOptions& step = model_.options();
  BRAID_CHECK(step.optimizer.name == "sgd", "optimizer.name is ", step.optimizer.name,
              "; federated clients train with sgd (momentum and weight decay allowed), as in "
              "FedAvg and FedProx; an adaptive optimizer belongs on the server: "
              "fedavg.server_optimizer adam");
  BRAID_CHECK(step.accumulate_steps == 1, "accumulate_steps is ", step.accumulate_steps,
              "; federated clients take one step per local batch: lower batch instead");

  const nn::ParamSet& params = model_.params();
  BRAID_CHECK(params.allocated(), "fedavg: the client's model has no parameters yet");
  std::vector<optim::Segment> segments;
  for (const auto& p : params.layout()) segments.push_back({p.name, p.offset, p.numel(), p.decay});
  optimizer_ = optim::make_optimizer(step.optimizer, std::move(segments), params.size());
  // state() shares memory with the optimizer: the pointers stay valid as long as it lives.
  for (const auto& [name, t] : optimizer_->state())
    if (t.dtype() == DType::f32) {
      optimizer_state_.push_back(t.f32());
      optimizer_state_floats_.push_back(t.numel());
    }

  cache_ = model_.module().make_cache();
  const int64_t B = options_.batch;
  inputs_ = Tensor::empty(data::batch_shape(B, data_->input_shape()), data_->input_dtype(),
                          MemCategory::data);
  targets_ = Tensor::empty(data::batch_shape(B, data_->target_shape()), data_->target_dtype(),
                           MemCategory::data);
  refs_.resize(static_cast<size_t>(B));
  global_ = Buffer(static_cast<size_t>(params.size()) * sizeof(float), MemCategory::parameters);
  size_t buffer_bytes = 0;
  for (const nn::NamedBuffer& b : params.buffers()) {
    buffer_bytes += b.value.nbytes();
    if (b.value.dtype() == DType::f32) buffer_floats_ += b.value.numel();
  }
  buffers_ = Buffer(buffer_bytes, MemCategory::other);
}

FedAvgClient::~FedAvgClient() = default;

// A fresh optimizer's state is zero, and SGD's first step (b = d) is bitwise what any
// later step does from a zero momentum buffer (b = momentum * 0 + d), so zeroing the state
// is starting afresh without touching its step count.
void FedAvgClient::reset_optimizer() {
  for (size_t i = 0; i < optimizer_state_.size(); ++i)
    std::memset(optimizer_state_[i], 0,
                static_cast<size_t>(optimizer_state_floats_[i]) * sizeof(float));
}

ClientUpdate FedAvgClient::train(int64_t round, int client, std::span<const int64_t> indices,
                                 float lr, std::span<float> delta, std::span<float> buffer_delta) {
  nn::ParamSet& params = model_.params();
  const int64_t P = params.size();
  const auto n = static_cast<int64_t>(indices.size());
  BRAID_CHECK(n >= 1, "fedavg: client ", client, " has no samples");
  BRAID_CHECK(std::isfinite(lr) && lr >= 0.0f, "fedavg: client learning rate ", lr,
              " must be finite and >= 0");
  BRAID_CHECK(static_cast<int64_t>(delta.size()) == P, "fedavg: the delta accumulator holds ",
              delta.size(), " floats but the model's flat buffer has ", P);
  BRAID_CHECK(buffer_delta.empty() || static_cast<int64_t>(buffer_delta.size()) == buffer_floats_,
              "fedavg: the buffer accumulator holds ", buffer_delta.size(),
              " floats but the model's f32 buffers have ", buffer_floats_);
  client_rng(model_.options().seed, round, client);  // checks round and client
  const int64_t dataset_size = data_->size();
  for (const int64_t i : indices)
    BRAID_CHECK(i >= 0 && i < dataset_size, "fedavg: client ", client, " holds sample ", i,
                " of a training set of ", dataset_size);

  save_global();
  ClientUpdate update;
  try {
    update = run_epochs(round, client, indices, lr);
  } catch (...) {
    restore_global();  // a worker's model stays the global one whatever failed
    throw;
  }
  report(static_cast<float>(n), delta, buffer_delta);
  restore_global();
  return update;
}

void FedAvgClient::save_global() {
  const nn::ParamSet& params = model_.params();
  std::memcpy(global_.data(), params.params(), static_cast<size_t>(params.size()) * sizeof(float));
  auto* out = static_cast<std::byte*>(buffers_.data());
  for (const nn::NamedBuffer& b : params.buffers()) {
    std::memcpy(out, b.value.raw(), b.value.nbytes());
    out += b.value.nbytes();
  }
}

void FedAvgClient::restore_global() {
  const nn::ParamSet& params = model_.params();
  std::memcpy(params.params(), global_.data(), static_cast<size_t>(params.size()) * sizeof(float));
  const auto* saved = static_cast<const std::byte*>(buffers_.data());
  for (const nn::NamedBuffer& b : params.buffers()) {
    std::memcpy(b.value.raw(), saved, b.value.nbytes());
    saved += b.value.nbytes();
  }
}

ClientUpdate FedAvgClient::run_epochs(int64_t round, int client, std::span<const int64_t> indices,
                                      float lr) {
  reset_optimizer();
  const auto n = static_cast<int64_t>(indices.size());
  const uint64_t seed = model_.options().seed;
  const Rng forward_rng = client_rng(seed, round, client).fork(kForwardPurpose);
  ClientUpdate update;
  update.samples = n;
  double loss_sum = 0;
  const int64_t B = options_.batch;
  for (int64_t e = 0; e < options_.local_epochs; ++e) {
    order_.assign(indices.begin(), indices.end());
    shuffle_client_epoch(seed, round, client, e, order_);
    const data::FillContext fill{seed, round * options_.local_epochs + e, options_.augment};
    for (int64_t begin = 0; begin < n; begin += B) {
      const int64_t rows = std::min(B, n - begin);
      const double loss =
          local_step(begin, rows, fill, forward_rng.fork(static_cast<uint64_t>(update.steps)), lr);
      loss_sum += loss * static_cast<double>(rows);
      ++update.steps;
    }
  }
  update.loss = loss_sum / static_cast<double>(n * options_.local_epochs);
  return update;
}

// Adds weight (w_k - w) and weight (b_k - b) while the model still holds w_k and b_k.
void FedAvgClient::report(float weight, std::span<float> delta, std::span<float> buffer_delta) {
  const nn::ParamSet& params = model_.params();
  const float* w = params.params();
  const auto* wg = static_cast<const float*>(global_.data());
  for (int64_t i = 0; i < params.size(); ++i) delta[i] += weight * (w[i] - wg[i]);
  if (buffer_delta.empty()) return;
  const auto* saved = static_cast<const std::byte*>(buffers_.data());
  float* out = buffer_delta.data();
  for (const nn::NamedBuffer& b : params.buffers()) {
    if (b.value.dtype() == DType::f32) {
      const float* now = b.value.f32();
      const auto* before = reinterpret_cast<const float*>(saved);
      for (int64_t i = 0; i < b.value.numel(); ++i) out[i] += weight * (now[i] - before[i]);
      out += b.value.numel();
    }
    saved += b.value.nbytes();
  }
}

double FedAvgClient::local_step(int64_t begin, int64_t rows, const data::FillContext& fill,
                                const Rng& rng, float lr) {
  // Positions key each sample's augmentation: its index in the dataset is unique to it,
  // whichever client, worker or batch slot it lands in.
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t index = order_[static_cast<size_t>(begin + j)];
    refs_[static_cast<size_t>(j)] = {index, index};
  }
  Tensor x = inputs_.slice_rows(0, rows);
  Tensor y = targets_.slice_rows(0, rows);
  data_->fill(std::span<const data::SampleRef>(refs_.data(), static_cast<size_t>(rows)), fill, x,
              y);

  nn::ParamSet& params = model_.params();
  nn::Module& module = model_.module();
  const StepOptions& step = model_.options();
  params.zero_grads();
  const Tensor& logits = module.forward(x, *cache_, {nn::Mode::train, rng, step.precision});
  const double loss = step.loss
                          ? step.loss->compute(logits, y, &dlogits_, 1.0f).loss
                          : nn::softmax_cross_entropy(logits, y, &dlogits_,
                                                      {.label_smoothing = step.label_smoothing})
                                .loss;
  // Outside begin_backward()/finish_backward() no "range is final" listener fires: the
  // strategy's own update or exchange (SingleProcess, DDP) must not run on a client's step.
  module.backward(dlogits_, *cache_, /*need_dx=*/false);
  float* g = params.grads();
  float* w = params.params();
  if (options_.prox_mu > 0) {
    const float mu = options_.prox_mu;
    const auto* wg = static_cast<const float*>(global_.data());
    for (int64_t i = 0; i < params.size(); ++i) g[i] += mu * (w[i] - wg[i]);
  }
  if (step.clip_grad_norm > 0)
    optim::clip_grad_norm(g, optimizer_->segments(), step.clip_grad_norm);
  optimizer_->step(w, g, lr);
  return loss;
}

}  // namespace braid::parallel
