// The server's step of federated averaging: how the global model moves once a round's
// clients have reported. Following Reddi et al. 2021 ("Adaptive federated optimization",
// Algorithm 2), the clients' weighted mean change
//   delta = sum_k n_k (w_k - w) / sum_k n_k
// is a pseudo-gradient (with the sign of a descent step), and the server applies it with an
// optimizer of its own:
//   avg   w += lr delta                          McMahan et al. 2017 (FedAvg) at lr = 1
//   avgm  m = beta m + delta; w += lr m          Hsu, Qi, Brown 2019 (FedAvgM)
//   adam  m = b1 m + (1 - b1) delta              Reddi et al. 2021 (FedAdam), no bias
//         v = b2 v + (1 - b2) delta^2            correction, as in their Algorithm 2;
//         w += lr m / (sqrt(v) + tau)            tau (eps) bounds the adaptivity
// Each option is a fedavg.* config key (server_lr, server_momentum as avgm's beta and
// adam's b1, server_beta2, server_eps as tau), and errors name it.
//
// A ServerOptimizer holds its state for one contiguous range of floats (a parameter
// server's key range, or the whole flat buffer) and updates element by element, so servers
// holding adjacent ranges together compute what one server over the union would. Its
// state is one flat vector (m, then v) for a checkpoint. Not thread-safe: one thread (a
// server loop's) steps it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/memory.h"

namespace braid::parallel {

enum class ServerOptimizerKind : uint8_t { avg, avgm, adam };
std::string_view server_optimizer_name(ServerOptimizerKind k);
// "avg", "avgm" or "adam"; anything else is an error naming fedavg.server_optimizer.
ServerOptimizerKind parse_server_optimizer(std::string_view text);

struct ServerOptimizerOptions {
  ServerOptimizerKind kind = ServerOptimizerKind::avg;
  float lr = 1.0f;        // fedavg.server_lr, > 0
  float momentum = 0.9f;  // fedavg.server_momentum: avgm's beta, adam's b1; [0, 1)
  float beta2 = 0.99f;    // fedavg.server_beta2 (adam), [0, 1)
  float eps = 1e-3f;      // fedavg.server_eps (adam's tau), > 0
};

// Checks the options the kind uses; errors name the fedavg.* key, the value and the range.
void validate(const ServerOptimizerOptions& options);

class ServerOptimizer {
 public:
  // Over `size` (>= 0) floats, its state zero (as every paper starts it).
  ServerOptimizer(const ServerOptimizerOptions& options, int64_t size);
  ServerOptimizer(const ServerOptimizer&) = delete;
  ServerOptimizer& operator=(const ServerOptimizer&) = delete;

  // One round: delta = delta_sum / total_weight elementwise, then the update above.
  // params and delta_sum hold size() floats; delta_sum is sum_k n_k (w_k - w) as the
  // clients added it (FedAvgClient::train), total_weight sum_k n_k (> 0). Allocates nothing.
  void step(std::span<float> params, std::span<const float> delta_sum, double total_weight);

  // The state for a checkpoint: avg none, avgm m, adam m then v (state_size() floats). A
  // view of the live state: it changes on the next step.
  std::span<const float> state() const;
  int64_t state_size() const { return state_size_; }
  // Restores a state() of the same kind and size; another size is an error naming
  // fedavg.server_optimizer and both sizes, and changes nothing.
  void load_state(std::span<const float> state);

  int64_t size() const { return size_; }
  int64_t rounds() const { return rounds_; }  // steps taken (not part of state())
  const ServerOptimizerOptions& options() const { return options_; }

 private:
  ServerOptimizerOptions options_;
  int64_t size_ = 0;
  int64_t rounds_ = 0;
  int64_t state_size_ = 0;
  Buffer state_;  // [m (avgm, adam) | v (adam)], MemCategory::optimizer
};

}  // namespace braid::parallel
