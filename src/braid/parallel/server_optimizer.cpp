#include "parallel/server_optimizer.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"

namespace braid::parallel {
namespace {

// Slots of state per float: avg keeps none, avgm a momentum, adam two moments.
int64_t slots(ServerOptimizerKind k) {
  switch (k) {
    case ServerOptimizerKind::avg:
      return 0;
    case ServerOptimizerKind::avgm:
      return 1;
    case ServerOptimizerKind::adam:
      return 2;
  }
  return 0;
}

void check_decay(std::string_view key, float value) {
  BRAID_CHECK(std::isfinite(value) && value >= 0.0f && value < 1.0f, key, " is ", value,
              "; a decay must be in [0, 1)");
}

}  // namespace

std::string_view server_optimizer_name(ServerOptimizerKind k) {
  switch (k) {
    case ServerOptimizerKind::avg:
      return "avg";
    case ServerOptimizerKind::avgm:
      return "avgm";
    case ServerOptimizerKind::adam:
      return "adam";
  }
  return "?";
}

ServerOptimizerKind parse_server_optimizer(std::string_view text) {
  for (auto k : {ServerOptimizerKind::avg, ServerOptimizerKind::avgm, ServerOptimizerKind::adam})
    if (text == server_optimizer_name(k)) return k;
  BRAID_CHECK(false, "fedavg.server_optimizer is '", std::string(text),
              "'; expected avg (FedAvg), avgm (FedAvgM: server momentum) or adam (FedAdam)");
  return ServerOptimizerKind::avg;
}

void validate(const ServerOptimizerOptions& o) {
  BRAID_CHECK(std::isfinite(o.lr) && o.lr > 0.0f, "fedavg.server_lr is ", o.lr,
              "; the server's learning rate must be finite and > 0 (1: plain FedAvg)");
  if (o.kind == ServerOptimizerKind::avg) return;
  check_decay("fedavg.server_momentum", o.momentum);
  if (o.kind != ServerOptimizerKind::adam) return;
  check_decay("fedavg.server_beta2", o.beta2);
  BRAID_CHECK(std::isfinite(o.eps) && o.eps > 0.0f, "fedavg.server_eps is ", o.eps,
              "; FedAdam's tau must be finite and > 0 (Reddi et al. tune it in 1e-5 .. 1e-1)");
}

ServerOptimizer::ServerOptimizer(const ServerOptimizerOptions& options, int64_t size)
    : options_(options), size_(size) {
  validate(options_);
  BRAID_CHECK(size_ >= 0, "fedavg: a server optimizer over ", size_, " floats");
  state_size_ = slots(options_.kind) * size_;
  state_ = Buffer(static_cast<size_t>(state_size_) * sizeof(float), MemCategory::optimizer);
}

std::span<const float> ServerOptimizer::state() const {
  return {static_cast<const float*>(state_.data()), static_cast<size_t>(state_size_)};
}

void ServerOptimizer::load_state(std::span<const float> state) {
  BRAID_CHECK(static_cast<int64_t>(state.size()) == state_size_, "fedavg.server_optimizer ",
              server_optimizer_name(options_.kind), " over ", size_, " floats keeps ", state_size_,
              " floats of state, but the state given has ", state.size(),
              "; was it saved by another server optimizer or key range?");
  if (state_size_ > 0) std::memcpy(state_.data(), state.data(), state.size() * sizeof(float));
}

void ServerOptimizer::step(std::span<float> params, std::span<const float> delta_sum,
                           double total_weight) {
  BRAID_CHECK(static_cast<int64_t>(params.size()) == size_ &&
                  static_cast<int64_t>(delta_sum.size()) == size_,
              "fedavg: the server optimizer holds ", size_, " floats but got ", params.size(),
              " parameters and ", delta_sum.size(), " deltas");
  BRAID_CHECK(std::isfinite(total_weight) && total_weight > 0, "fedavg: the round's clients hold ",
              total_weight, " samples in all; a round needs at least one");
  const auto inv = static_cast<float>(1.0 / total_weight);
  const float lr = options_.lr;
  float* w = params.data();
  const float* sum = delta_sum.data();
  float* m = static_cast<float*>(state_.data());
  const int64_t n = size_;
  switch (options_.kind) {
    case ServerOptimizerKind::avg:
      for (int64_t i = 0; i < n; ++i) w[i] += lr * (sum[i] * inv);
      break;
    case ServerOptimizerKind::avgm: {
      const float beta = options_.momentum;
      for (int64_t i = 0; i < n; ++i) {
        m[i] = beta * m[i] + sum[i] * inv;
        w[i] += lr * m[i];
      }
      break;
    }
    case ServerOptimizerKind::adam: {
      const float b1 = options_.momentum, b2 = options_.beta2, tau = options_.eps;
      float* v = m + n;
      for (int64_t i = 0; i < n; ++i) {
        const float d = sum[i] * inv;
        m[i] = b1 * m[i] + (1.0f - b1) * d;
        v[i] = b2 * v[i] + (1.0f - b2) * (d * d);
        w[i] += lr * m[i] / (std::sqrt(v[i]) + tau);
      }
      break;
    }
  }
  ++rounds_;
}

}  // namespace braid::parallel
