#include "plan/collective_cost.h"

#include <limits>

#include "core/error.h"

namespace braid::plan {
namespace {

constexpr int kMaxChunks = 64;

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

int log2_floor(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

int log2_ceil(int n) { return power_of_two(n) ? log2_floor(n) : log2_floor(n) + 1; }

void check_power_of_two(int ranks, Collective c) {
  BRAID_CHECK(power_of_two(ranks), algorithm_name(Algorithm::halving_doubling), " ",
              collective_name(c), " needs a power-of-two group, not ", ranks, " ranks");
}

// Recursive halving: each step exchanges half of what the rank still reduces.
void add_halving(std::vector<CommStep>& steps, double bytes, int ranks) {
  for (int m = 2; m <= ranks; m *= 2) steps.push_back({bytes / m, 1});
}

// Recursive doubling: the mirror of add_halving, each step doubling what a rank holds.
void add_doubling(std::vector<CommStep>& steps, double bytes, int ranks) {
  for (int m = ranks; m >= 2; m /= 2) steps.push_back({bytes / m, 1});
}

// Every rank lies at most `depth` hops from the root, and with the buffer cut in `chunks`
// the last chunk leaves the root after chunks - 1 steps: depth + chunks - 1 steps of a chunk.
CommStep pipeline(double bytes, int depth, int chunks) {
  return {bytes / chunks, depth + chunks - 1};
}

[[noreturn]] void unmodelled(Algorithm a) {
  BRAID_THROW(Error, "plan: no cost model for algorithm ", algorithm_name(a),
              "; it models ring, halving_doubling, binary_blocks and tree");
}

// Algorithms whose time depends on a chunk count (a pipeline); the others have one schedule.
bool pipelined(Collective collective, Algorithm algorithm) {
  if (collective == Collective::allreduce) return algorithm == Algorithm::tree;
  if (collective == Collective::broadcast) return algorithm != Algorithm::halving_doubling;
  return false;
}

}  // namespace

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::allreduce:
      return "allreduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::allgather:
      return "allgather";
    case Collective::broadcast:
      return "broadcast";
  }
  return "?";
}

std::vector<CommStep> collective_steps(Collective collective, Algorithm algorithm, double bytes,
                                       int ranks) {
  return collective_steps_in_chunks(collective, algorithm, bytes, ranks, 1);
}

std::vector<CommStep> collective_steps_in_chunks(Collective collective, Algorithm algorithm,
                                                 double bytes, int ranks, int chunks) {
  BRAID_CHECK(ranks >= 1, "a collective needs at least one rank, not ", ranks);
  BRAID_CHECK(chunks >= 1, "a pipeline needs at least one chunk, not ", chunks);
  std::vector<CommStep> steps;
  if (ranks == 1) return steps;
  const double n = ranks;
  switch (collective) {
    case Collective::allreduce:
      switch (algorithm) {
        case Algorithm::ring:
          steps.push_back({bytes / n, 2 * (ranks - 1)});
          break;
        case Algorithm::halving_doubling:
          check_power_of_two(ranks, collective);
          add_halving(steps, bytes, ranks);
          add_doubling(steps, bytes, ranks);
          break;
        case Algorithm::binary_blocks: {
          const int m = 1 << log2_floor(ranks);
          if (ranks > m) steps.push_back({bytes, 1});  // the extra ranks fold in
          add_halving(steps, bytes, m);
          add_doubling(steps, bytes, m);
          if (ranks > m) steps.push_back({bytes, 1});  // and get the result back
          break;
        }
        case Algorithm::tree: {
          const CommStep way = pipeline(bytes, log2_ceil(ranks), chunks);
          steps.push_back({way.bytes, 2 * way.repeats});  // reduce up, broadcast down
          break;
        }
        default:
          unmodelled(algorithm);
      }
      break;
    case Collective::reduce_scatter:
    case Collective::allgather:
      // braid runs these by ring only; halving-doubling stands for recursive halving
      // (doubling for allgather), which moves the same bytes in log2 N steps.
      if (algorithm == Algorithm::halving_doubling) {
        check_power_of_two(ranks, collective);
        if (collective == Collective::reduce_scatter) {
          add_halving(steps, bytes, ranks);
        } else {
          add_doubling(steps, bytes, ranks);
        }
      } else {
        steps.push_back({bytes / n, ranks - 1});
      }
      break;
    case Collective::broadcast:
      switch (algorithm) {
        case Algorithm::ring:  // a chain from the root
          steps.push_back(pipeline(bytes, ranks - 1, chunks));
          break;
        case Algorithm::halving_doubling:  // scatter, then allgather (braid's large-message one)
          check_power_of_two(ranks, collective);
          add_halving(steps, bytes, ranks);
          add_doubling(steps, bytes, ranks);
          break;
        case Algorithm::binary_blocks:  // no such broadcast: the tree stands for it
        case Algorithm::tree:
          steps.push_back(pipeline(bytes, log2_ceil(ranks), chunks));
          break;
        default:
          unmodelled(algorithm);
      }
      break;
  }
  return steps;
}

double steps_seconds(const std::vector<CommStep>& steps, const Link& link) {
  double seconds = 0;
  for (const CommStep& s : steps) seconds += s.repeats * link.seconds(s.bytes);
  return seconds;
}

int best_chunks(Collective collective, Algorithm algorithm, double bytes, int ranks,
                const Link& link) {
  if (ranks == 1 || !pipelined(collective, algorithm)) return 1;
  int best = 1;
  double best_seconds = std::numeric_limits<double>::infinity();
  for (int c = 1; c <= kMaxChunks; ++c) {
    const double s =
        steps_seconds(collective_steps_in_chunks(collective, algorithm, bytes, ranks, c), link);
    if (s < best_seconds) best = c, best_seconds = s;
  }
  return best;
}

double collective_seconds(Collective collective, Algorithm algorithm, double bytes, int ranks,
                          const Link& link) {
  const int c = best_chunks(collective, algorithm, bytes, ranks, link);
  return steps_seconds(collective_steps_in_chunks(collective, algorithm, bytes, ranks, c), link);
}

namespace {

constexpr Algorithm kAlgorithms[] = {Algorithm::ring, Algorithm::halving_doubling,
                                     Algorithm::binary_blocks, Algorithm::tree};

// The fastest flat algorithm; ring first, so a tie keeps the simplest.
CollectiveCost best_flat(Collective collective, double bytes, int ranks, const Link& link) {
  CollectiveCost best;
  best.seconds = std::numeric_limits<double>::infinity();
  for (Algorithm a : kAlgorithms) {
    if (a == Algorithm::halving_doubling && !power_of_two(ranks)) continue;
    const double s = collective_seconds(collective, a, bytes, ranks, link);
    if (s < best.seconds) best.seconds = s, best.algorithm = a;
  }
  return best;
}

Link shared(Link link, int flows) {
  link.bytes_per_s /= flows;
  return link;
}

}  // namespace

CollectiveCost best_collective(Collective collective, double bytes, const GroupPlace& place,
                               const Cluster& cluster) {
  const int n = place.ranks, k = place.per_host;
  BRAID_CHECK(n >= 1 && k >= 1 && place.sharing >= 1, "a group place needs positive counts (", n,
              " ranks, ", k, " a host, ", place.sharing, " sharing)");
  if (n == 1) return {};
  if (k >= n) return best_flat(collective, bytes, n, cluster.intra);
  // Flat across hosts, every step priced on the network, its bandwidth split among the
  // `sharing` groups. With one rank a host any algorithm fits that model.
  const Link flat_link = shared(cluster.inter, place.sharing);
  if (k == 1) return best_flat(collective, bytes, n, flat_link);
  // With k ranks a host only the ring does: laid out host by host it sends one flow out of
  // each host (its intra hops priced as inter ones, a little pessimistic). Halving-doubling
  // and the tree would have several of a host's ranks cross at once; across hosts they run
  // in the hierarchical schedule's network stage instead.
  CollectiveCost flat;
  flat.seconds = collective_seconds(collective, Algorithm::ring, bytes, n, flat_link);
  BRAID_CHECK(n % k == 0, "a group of ", n, " ranks cannot sit ", k, " on each host");
  const int hosts = n / k;
  // k rings (one per local rank) cross the network at once, each on 1/k of the bytes.
  const Link rings_link = shared(cluster.inter, place.sharing * k);
  CollectiveCost inter;
  double intra = 0;
  switch (collective) {
    case Collective::allreduce:
      intra = best_flat(Collective::reduce_scatter, bytes, k, cluster.intra).seconds +
              best_flat(Collective::allgather, bytes, k, cluster.intra).seconds;
      inter = best_flat(Collective::allreduce, bytes / k, hosts, rings_link);
      break;
    case Collective::reduce_scatter:
    case Collective::allgather:
      intra = best_flat(collective, bytes, k, cluster.intra).seconds;
      inter = best_flat(collective, bytes / k, hosts, rings_link);
      break;
    case Collective::broadcast:
      // The whole buffer crosses once per host, one flow a host.
      intra = best_flat(collective, bytes, k, cluster.intra).seconds;
      inter = best_flat(collective, bytes, hosts, flat_link);
      break;
  }
  if (flat.seconds <= inter.seconds + intra) return flat;
  // The algorithm reported is the network stage's: the one a planner would tune.
  return {inter.seconds + intra, inter.algorithm, true};
}

}  // namespace braid::plan
