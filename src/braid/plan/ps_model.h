// A parameter-server job's rate under its rules (parallel/ps_shard.h), over workers whose
// compute varies from step to step. Each worker's compute time of a step is its mean times
// (1 + jitter x a standard normal draw), jitter being the cluster's (a key of the cluster
// file; 0: identical workers, where the rules differ only in what they throw away). The
// expectations of order statistics are taken over a fixed set of seeded draws, so a plan is
// the same on every rank and every run.
//
//   sync, b backup workers: a step ends at the (W - b)-th gradient to arrive and applies
//     W - b of them: step = E[X(W-b)] + exchange; samples a step (W - b) x batch.
//   async: every worker steps alone: a worker's cycle is E[X] + its exchange, and the
//     servers apply what arrives, up to what their links carry.
//   ssp, bound s: a worker waits only when it is s steps ahead of the slowest, so the
//     slowest's lag is spread over s + 1 steps: cycle = E[X] + (E[X(W)] - E[X]) / (s + 1)
//     + exchange (s = 0 is sync).
#pragma once

namespace braid::plan {

enum class PsMode { sync, async, ssp };

// E[X(k)]: the expected k-th smallest of n draws of 1 + jitter x N(0, 1), k in [1, n].
double expected_order_statistic(int n, int k, double jitter);

struct PsRate {
  double step_s = 0;         // between two updates a worker waits for (sync, ssp), or its cycle
  double samples_per_s = 0;  // every worker's samples applied a second
};

// `compute_s`: a worker's mean compute a step; `worker_exchange_s`: its push and pull;
// `server_s`: what one update costs the servers' links and optimizer (the cap on async).
PsRate ps_rate(PsMode mode, int workers, int backup, int staleness, double jitter, double compute_s,
               double worker_exchange_s, double server_s, int batch_per_worker);

}  // namespace braid::plan
