#include "parallel/fedavg_round.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"
#include "core/rng.h"

namespace braid::parallel {

int clients_per_round(int clients, double fraction) {
  BRAID_CHECK(clients >= 1, "fedavg.clients is ", clients,
              "; federated averaging needs at least one client");
  BRAID_CHECK(std::isfinite(fraction) && fraction > 0.0 && fraction <= 1.0, "fedavg.fraction is ",
              fraction, "; the share of clients per round must be in (0, 1] (1: every client)");
  const long m = std::lround(fraction * clients);
  return static_cast<int>(std::clamp<long>(m, 1, clients));
}

// Floyd's algorithm (Bentley and Floyd 1987, "A sample of brilliance"): m draws give a
// uniform m-subset with O(m) memory, where a partial shuffle would size a table by K.
std::vector<int> choose_clients(uint64_t seed, int64_t round, int clients, double fraction) {
  const int m = clients_per_round(clients, fraction);
  BRAID_CHECK(round >= 0 && static_cast<uint64_t>(round) < kFedAvgRoundStream, "fedavg: round ",
              round, " is out of range");
  Rng rng(seed, kFedAvgRoundStream | static_cast<uint64_t>(round));
  std::unordered_set<int> picked;
  picked.reserve(static_cast<size_t>(m));
  for (int j = clients - m; j < clients; ++j) {
    const int t = static_cast<int>(rng.below(static_cast<uint64_t>(j) + 1));
    picked.insert(picked.contains(t) ? j : t);
  }
  std::vector<int> out(picked.begin(), picked.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> assign_clients(std::span<const int> chosen,
                                             std::span<const int64_t> samples, int workers) {
  BRAID_CHECK(workers >= 1, "fedavg: clients are dealt to ", workers,
              " workers; a round needs at least one");
  const auto size_of = [&](int c) -> int64_t {
    if (samples.empty()) return 1;
    BRAID_CHECK(c >= 0 && static_cast<size_t>(c) < samples.size(), "fedavg: client ", c,
                " has no sample count (", samples.size(), " given)");
    return samples[static_cast<size_t>(c)];
  };
  std::vector<int> order(chosen.begin(), chosen.end());
  // Largest first; equal sizes by id, so the deal does not depend on the input's order.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int64_t na = size_of(a), nb = size_of(b);
    return na != nb ? na > nb : a < b;
  });
  std::vector<std::vector<int>> out(static_cast<size_t>(workers));
  std::vector<int64_t> load(static_cast<size_t>(workers), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    BRAID_CHECK(i == 0 || order[i] != order[i - 1], "fedavg: client ", order[i],
                " is chosen twice in one round");
    // min_element returns the first of equal loads: the lowest worker id.
    const auto w = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[w].push_back(order[i]);
    load[w] += size_of(order[i]);
  }
  for (auto& list : out) std::sort(list.begin(), list.end());
  return out;
}

}  // namespace braid::parallel
