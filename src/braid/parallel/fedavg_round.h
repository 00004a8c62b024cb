// Which clients train in a round of federated averaging, and which worker trains each.
// McMahan et al. 2017 ("Communication-efficient learning of deep networks from
// decentralized data", Algorithm 1): each round the server picks m = max(1, round(C * K))
// of the K clients at random, without replacement. Here the pick is a pure function of
// (seed, round, K, C), drawn from Rng(seed, kFedAvgRoundStream | round), so every process
// (every worker and server) computes the same clients for a round with no communication,
// and a resumed run picks what an uninterrupted one did.
//
// The chosen clients are then dealt to W workers, balanced by sample count: each worker
// trains its clients one after another, so a round takes as long as the worker with the
// most samples. The deal is the longest-processing-time rule (Graham 1969): clients by
// size, largest first, each to the worker with the fewest samples so far; its largest
// load is at most 4/3 of the best possible. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace braid::parallel {

// The Rng stream of the round's pick (or'ed with the round): apart from the client split's
// (kClientSplitStream = 1 << 61, data/client_split.h), the train/validation split's
// (1 << 62), the per-sample streams (1 << 63) and a client's local randomness
// (kFedAvgLocalStream = 1 << 59, fedavg_client.h).
inline constexpr uint64_t kFedAvgRoundStream = 1ull << 60;

// m = max(1, round(C * K)), rounded half away from zero. Needs K = clients >= 1 and C =
// fraction in (0, 1]: errors name fedavg.clients and fedavg.fraction.
int clients_per_round(int clients, double fraction);

// The clients of round `round` (>= 0): clients_per_round(clients, fraction) distinct ids
// in [0, clients), ascending.
std::vector<int> choose_clients(uint64_t seed, int64_t round, int clients, double fraction);

// The chosen clients dealt to `workers` (>= 1) workers: result[w] holds worker w's clients,
// ascending; every chosen client is in exactly one list (some lists are empty when there
// are fewer clients than workers). samples[c] is client c's sample count (n_c, indexed by
// client id, so it covers every id in `chosen`); an empty `samples` counts every client
// alike, which deals them round-robin. Ties go to the lower client id and worker id, so the
// deal is the same on every process.
std::vector<std::vector<int>> assign_clients(std::span<const int> chosen,
                                             std::span<const int64_t> samples, int workers);

}  // namespace braid::parallel
