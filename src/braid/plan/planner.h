// The planner: every configuration of the strategies braid runs, for a cluster's ranks,
// simulated (plan/simulate.h), those that do not fit the cluster's memory set apart, the
// rest ranked by predicted samples a second.
//
// Enumerated: every factorisation D x T x P of the ranks (T among the widths the profile
// measured, P up to the model's units), ZeRO stages 0-3 on the data axis (3 without a
// pipeline, as braid runs it), for pipelines M in {P, 2P, 4P, 8P} micro-batches where the
// batch divides, the three schedules (interleaved with 2 chunks) and recomputation,
// buckets of 25 and 4 MiB, gradients on the wire in fp32 or bf16; synchronous parameter
// servers (S servers, the other ranks working). All of these train the same model on the
// same samples a step (bf16 on the wire rounds the sum). Predictions within 0.5 % tie, and
// the simpler configuration goes first (DDP before ZeRO, fp32 before bf16 on the wire).
// The lossy codecs the profile measured (int8, PowerSGD; DDP and ZeRO at 25 MiB buckets)
// and local SGD (H = 4, 16) change what is summed or when, so they are listed apart,
// never the first choice.
#pragma once

#include <string>
#include <vector>

#include "plan/simulate.h"

namespace braid::plan {

struct Candidate {
  PlanConfig config;
  Prediction prediction;
  // false: local SGD, a lossy codec, parameter servers' async, SSP or backup workers
  // (another optimisation: listed, never the first choice)
  bool same_training = true;
};

struct PlanOptions {
  int batch = 0;  // the global batch a step
  bool include_local_sgd = true;
  // Fewer knobs (25 MiB buckets, fp32 on the wire, M in {P, 4P}, 1F1B and interleaved):
  // what the scaling report needs at thousands of ranks, in seconds.
  bool quick = false;
};

// Every configuration that can run, fitting ones first by samples/s (fastest first), then
// those over memory (by their memory). Errors: a batch of 0, a profile with no units.
std::vector<Candidate> plan_all(const ModelProfile& profile, const Cluster& cluster,
                                const PlanOptions& options);
// The first fitting candidate with same_training, or null.
const Candidate* best(const std::vector<Candidate>& ranked);

// The `braid launch ... braid train` command line that runs `c` (config keys as flags).
std::string train_command(const PlanConfig& c, const std::string& model, int ranks, int batch);

}  // namespace braid::plan
