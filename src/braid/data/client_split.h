// Partitions of a labelled dataset's index set [0, N) over the clients of federated
// averaging: one sorted index list per client, every index in exactly one list. Each is a
// pure function of (labels, num_classes, clients, spec), drawn from
// Rng(spec.seed, kClientSplitStream), so every rank computes the same split.
//
// Three kinds, the standard ones of the federated-learning literature:
//   iid                one seeded permutation of [0, N) cut into `clients` contiguous pieces,
//                      the first N % clients of them one longer.
//   dirichlet          the Dirichlet label skew of Hsu, Qi, Brown 2019 ("Measuring the
//                      effects of non-identical data distribution") in its per-class form, as
//                      NIID-Bench (Li et al. 2022) and FedLab (hetero_dir) build it: each
//                      class's samples, shuffled once, are dealt to the clients in
//                      proportions p ~ Dir(alpha * 1_clients), drawn per class. Class c's
//                      boundaries are cumulative roundings, round(n_c * (p_0 + ... + p_j)),
//                      so the counts sum exactly to n_c. Small alpha (0.05) gives clients
//                      dominated by one or two classes, large alpha (1000) is close to iid.
//                      A draw that leaves a client empty is redrawn (every class again), up
//                      to kDirichletAttempts times; then it is an error asking for a larger
//                      alpha or fewer clients.
//   labels_per_client  the "pathological non-IID" split of McMahan et al. 2017, made exact:
//                      each client holds samples of exactly k distinct labels. The labels
//                      that occur (P of them) are permuted once; client i holds the labels at
//                      positions (i * k + j) mod P, j < k, so every label has
//                      floor(clients * k / P) or one more holders. Each label's samples,
//                      shuffled, are cut evenly among its holders (sizes differing by at
//                      most one, lower client ids first). McMahan's own construction (2 * clients
//                      shards of the label-sorted order, dealt at random) can give a client
//                      two shards of one label; this one cannot. A partition must cover every
//                      index, so clients * k >= P, and every label needs at least as many
//                      samples as holders.
// Errors are braid::Error naming the key (fedavg.split, fedavg.clients, fedavg.alpha,
// fedavg.labels_per_client) or the offending label, with the value and what to change.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace braid {
class Rng;
}

namespace braid::data {

enum class ClientSplitKind : uint8_t { iid, dirichlet, labels_per_client };
std::string_view client_split_kind_name(ClientSplitKind k);
// "iid", "dirichlet" or "labels_per_client"; anything else is an error naming fedavg.split.
ClientSplitKind parse_client_split_kind(std::string_view text);

// The Rng stream a client split draws from: apart from the sampler's (the epoch), the
// per-sample streams (kSampleStreamBit = 1 << 63, dataset.h) and the train/validation
// split's (kSplitStream = 1 << 62, splits.h), so a client split seeded like the run shares
// no draws with them.
inline constexpr uint64_t kClientSplitStream = 1ull << 61;

// How many Dirichlet draws may leave a client empty before split_clients gives up.
inline constexpr int kDirichletAttempts = 100;

// Config keys, as errors name them: fedavg.split, fedavg.alpha, fedavg.labels_per_client
// (and fedavg.clients for split_clients' client count).
struct ClientSplitSpec {
  ClientSplitKind kind = ClientSplitKind::iid;
  double alpha = 0.5;         // dirichlet: the concentration, > 0; small is skewed
  int labels_per_client = 2;  // labels_per_client: k, the distinct labels each client holds
  uint64_t seed = 0;
};

// Checks the spec on its own (the kind's keys only); split_clients also checks it against
// the labels and the client count.
void validate(const ClientSplitSpec& spec);

// The partition of [0, labels.size()) over `clients` clients that the spec describes: list
// c holds client c's sample indices, ascending; no list is empty. Needs
// 1 <= clients <= labels.size(), num_classes >= 1 and every label in [0, num_classes).
std::vector<std::vector<int64_t>> split_clients(std::span<const int32_t> labels, int num_classes,
                                                int clients, const ClientSplitSpec& spec);

// The building blocks of the dirichlet kind, for tests and for callers with their own Rng.
// A Gamma(shape, 1) variate, shape > 0: Marsaglia and Tsang 2000 for shape >= 1, and for
// shape < 1 their boost Gamma(shape + 1) * u^(1 / shape), which can underflow to 0 for small
// shapes (at 0.01, any u < 1e-3 does); sample_dirichlet works in logs and never does.
double sample_gamma(Rng& rng, double shape);
// p ~ Dir(alpha * 1_n), n >= 1, alpha > 0: n proportions that sum to 1.
std::vector<double> sample_dirichlet(Rng& rng, double alpha, int n);

}  // namespace braid::data
