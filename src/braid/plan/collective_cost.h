// A collective's time over an alpha-beta link, from the algorithm's steps: each step, every
// rank sends one message of the step's bytes to a peer and receives one, so a step costs
// latency + bytes / bandwidth, and the collective costs the sum of its steps. The same step
// lists give the closed forms (tests/plan/collective_cost_test.cpp) and the simulator's
// communication tasks (plan/simulate.cpp). The algorithms are braid's own (comm/):
//
//   ring allreduce: N-1 reduce-scatter steps then N-1 allgather steps of B/N bytes:
//     2(N-1) x latency + 2(N-1)/N x B / bandwidth.
//   recursive halving-doubling (N a power of two): log2 N halving steps of B/2, B/4, ...,
//     then the same doubling back: 2 log2 N x latency + 2(N-1)/N x B / bandwidth.
//   binary blocks (any N): halving-doubling over the largest power of two M <= N, the
//     N - M others folded in by a whole-buffer send before and after: two more steps of B.
//   tree: a binary tree's reduce then broadcast, each pipelined in chunks, the chunk count
//     chosen to minimise the time ((depth + c - 1) steps of B / c each way).
//   reduce-scatter, allgather (ring): N-1 steps of B/N. Broadcast: the pipelined tree.
//
// Across hosts (plan/cluster.h) a group of N ranks with k on each host runs hierarchically
// when k > 1 and there is more than one host: a reduce-scatter inside each host, the
// collective over the hosts on 1/k of the bytes (k such rings share a host's link), an
// allgather inside each host; otherwise flat over the slowest link it crosses (with k > 1
// the ring only, the one flat schedule that sends a single flow out of each host). The
// cost picks the fastest, as braid's selection table does from measurements.
#pragma once

#include <string_view>
#include <vector>

#include "comm/algorithm.h"
#include "plan/cluster.h"

namespace braid::plan {

enum class Collective { allreduce, reduce_scatter, allgather, broadcast };
// comm's own algorithms (comm/algorithm.h); the model covers ring, halving_doubling,
// binary_blocks and tree (direct and automatic are an error).
using comm::Algorithm;
using comm::algorithm_name;

std::string_view collective_name(Collective c);

// One step: every rank sends `bytes` and receives as many, `repeats` times in a row.
struct CommStep {
  double bytes = 0;
  int repeats = 1;
};

// The steps of `collective` by `algorithm` over `ranks` ranks of `bytes` (the whole
// buffer, as each rank holds it before an allreduce or after an allgather). Empty for one
// rank. halving_doubling needs a power of two (an error otherwise). A pipelined schedule
// (tree; broadcast's ring chain) comes unpipelined, in one chunk: its best chunk count
// depends on the link, so collective_seconds chooses it (best_chunks) and the steps at
// that count are collective_steps_in_chunks'. reduce_scatter and allgather are ring-only
// in braid: halving_doubling there means recursive halving (doubling), the others the ring.
std::vector<CommStep> collective_steps(Collective collective, Algorithm algorithm, double bytes,
                                       int ranks);
std::vector<CommStep> collective_steps_in_chunks(Collective collective, Algorithm algorithm,
                                                 double bytes, int ranks, int chunks);
double steps_seconds(const std::vector<CommStep>& steps, const Link& link);

// The chunk count in 1..64 that makes the schedule fastest on `link`; 1 when it does not
// pipeline.
int best_chunks(Collective collective, Algorithm algorithm, double bytes, int ranks,
                const Link& link);

// The time of `collective` by `algorithm` over a flat group on one link, pipelined
// schedules at their best chunk count.
double collective_seconds(Collective collective, Algorithm algorithm, double bytes, int ranks,
                          const Link& link);

// Where a group's ranks sit: `ranks` in all, `per_host` of them on each host (1 when the
// group spans hosts one rank each; `ranks` when it fits in one host), and `sharing` groups
// alike using each host's inter-host link at once (their bandwidth split between them).
struct GroupPlace {
  int ranks = 1;
  int per_host = 1;
  int sharing = 1;
};

struct CollectiveCost {
  double seconds = 0;
  Algorithm algorithm = Algorithm::ring;
  bool hierarchical = false;
};

// The fastest algorithm for `collective` of `bytes` over a group placed as `place`. When
// hierarchical, `algorithm` is the one across hosts (the stages inside a host take their
// own fastest). `ranks` must be a multiple of `per_host` when the group spans hosts.
CollectiveCost best_collective(Collective collective, double bytes, const GroupPlace& place,
                               const Cluster& cluster);

}  // namespace braid::plan
