// One parameter server's shard: its key range of the parameters, the optimizer (and its
// state) over that range, and the consistency rule that decides when workers' gradients
// are applied and when a worker may pull. No transport here: the server loop feeds it the
// pushes and pulls it receives and sends what it answers, so the rules are tested alone.
//
// Consistency modes (ps.mode):
//   sync   Step t's update is the mean of W - b workers' gradients for t, applied once the
//          first W - b arrived (b = backup_workers: Chen et al. 2016, "Revisiting
//          distributed synchronous SGD"); a gradient for t arriving after t was applied is
//          dropped and counted. A worker at step t may pull once t updates were applied.
//   async  Every gradient is applied on arrival (Hogwild-style parameter server, Dean et
//          al. 2012); its staleness is the updates applied since the worker pulled the
//          parameters it computed on. With staleness_lr the rate is divided by
//          1 + staleness (Zhang et al. 2016, "Staleness-aware async-SGD").
//   ssp    As async, and a worker more than `staleness_bound` steps ahead of the slowest
//          live worker may not pull until that one catches up (Ho et al. 2013,
//          "More effective distributed ML via a stale synchronous parallel parameter server").
// Every applied gradient's staleness goes into a histogram (0 for sync). A worker that is
// lost (dead, or gone past its deadline) stops counting: sync waits for the live ones
// only when backup workers cover it, else the shard reports that it cannot go on.
//
// Thread safety: none; the server loop's one thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/key_ranges.h"
#include "parallel/server_optimizer.h"

namespace braid::parallel {

enum class PsMode : uint8_t { sync, async, ssp };
std::string_view ps_mode_name(PsMode m);
// "sync", "async" or "ssp"; anything else is an error naming ps.mode.
PsMode parse_ps_mode(std::string_view text);

struct PsRules {
  PsMode mode = PsMode::sync;
  // Federated averaging (sync mode, no backup workers): a push is a worker's weighted sum of
  // its clients' model changes, sum n_k (w_k - w), with its weight sum n_k; a round applies
  // once every live worker pushed, through this server optimizer (server_optimizer.h), and
  // a lost worker only leaves the round to the others.
  std::optional<ServerOptimizerOptions> federated{};
  int workers = 1;
  int backup_workers = 0;     // sync: updates apply after workers - backup_workers gradients
  int staleness_bound = 0;    // ssp: steps a worker may run ahead of the slowest
  bool staleness_lr = false;  // async, ssp: lr / (1 + staleness)
};

// Checks the rules on their own: errors name the ps.* keys (ps.backup_workers, ...).
void validate(const PsRules& rules);

// What the server got with a gradient.
struct Push {
  int worker = 0;
  int64_t step = 0;      // the worker's step (sync: the update it is for)
  int64_t based_on = 0;  // the shard's version() the worker last pulled
  float lr = 0;          // the worker's learning rate for this step
  int64_t weight = 1;    // federated: the samples the pushed change sums over
};

// What a server checkpoints of its shard, and resumes from.
struct PsShardSnapshot {
  std::vector<float> params;
  optim::NamedTensors optimizer;  // Optimizer::state()
  int64_t version = 0;
  std::vector<int64_t> clocks;  // per worker: steps pushed
};

class PsShard {
 public:
  // `initial` holds the range's starting values (range.size() floats); the optimizer
  // is built over the range's tensors (segments_in).
  PsShard(KeyRange range, std::span<const optim::Segment> segments, std::span<const float> initial,
          const optim::OptimizerConfig& optimizer, PsRules rules);

  // A worker's gradient for this range (range().size() floats). Returns how many updates
  // it caused (0 or 1; sync: 1 when it completed a step).
  int push(const Push& p, std::span<const float> grads);
  // Whether a worker about to compute step `step` may read the parameters now.
  bool may_pull(int64_t step) const;
  // The worker is gone: it no longer counts in sync steps or in the slowest-worker bound.
  // Throws braid::Error naming it when sync mode can then never complete a step.
  void lose_worker(int worker);
  // A lost worker spoke again (async, ssp: it was only slow): it counts again from the
  // steps it has pushed.
  void readmit_worker(int worker);
  // A worker that spoke to a restarted server (ps_restarts.h) for the first time, about to
  // run step `step`: it counts again, its clock at least `step` (the checkpoint the server
  // reloaded may predate its last pushes). Sync mode cannot: an error saying so.
  void readmit_worker(int worker, int64_t step);
  // A restarted worker (a new process in a lost worker's place) counts again, from the step
  // returned: async, its own clock (the steps it pushed: none skipped, the step it died in
  // computed again); ssp, that or the slowest live worker's clock when later (nobody waits
  // for it to catch up; the steps between are skipped); sync and federated, the open step
  // (it contributes from there on; backup workers covered the steps it missed). Its clock
  // becomes that step.
  int64_t rejoin_worker(int worker);
  int64_t clock(int worker) const { return clock_[static_cast<size_t>(worker)]; }  // steps pushed
  const PsRules& rules() const { return rules_; }

  // The shard's state, and the same loaded back (ranges and worker counts must agree; an
  // error names what differs).
  PsShardSnapshot snapshot() const;
  void restore(const PsShardSnapshot& snapshot);

  std::span<const float> params() const { return params_; }
  const KeyRange& range() const { return range_; }
  int64_t version() const { return version_; }  // updates applied
  int64_t dropped() const { return dropped_; }  // sync: late gradients dropped
  // histogram[k]: gradients applied k updates after their parameters were pulled (the
  // last bucket counts k >= its index).
  const std::vector<int64_t>& staleness_histogram() const { return histogram_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  int live_workers() const;

  static constexpr size_t kHistogramBuckets = 64;

 private:
  void apply(std::span<const float> grads, float lr, int64_t staleness);
  // Sync: applies the open step once enough gradients arrived; returns 1 if it did.
  int complete_step(float lr);
  int64_t slowest_live_clock() const;

  KeyRange range_;
  PsRules rules_;
  std::vector<float> params_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<float> sum_;  // sync: the gradients of the open step so far
  int arrived_ = 0;         // sync: gradients in sum_
  double weight_sum_ = 0;   // federated: the weights of the pushes in sum_
  std::unique_ptr<ServerOptimizer> server_optimizer_;  // federated
  int64_t version_ = 0;
  int64_t dropped_ = 0;
  std::vector<int64_t> clock_;  // per worker: steps pushed
  std::vector<bool> live_;
  std::vector<int64_t> histogram_;
};

}  // namespace braid::parallel
