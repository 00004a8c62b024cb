// Strategy: what differs between one process, DDP, ZeRO, a parameter-server worker and a
// pipeline stage (docs/ARCHITECTURE.md, "Strategies"). A strategy owns the model's flat
// parameter and gradient buffers (a ParamSet), the optimizer (or its shard) and the
// groups it talks over. The trainer owns data, logging, evaluation and when to checkpoint;
// it sees only step() and the state in the full logical layout, so it never branches on
// buckets, shards, servers or micro-batches.
//
// Life cycle: a strategy is built over a module whose parameters are not yet declared; it
// declares them, allocates the buffers where its communication wants them, writes the
// initial values (the same on every rank) and builds its optimizer. Then step() as often
// as wanted. Not thread-safe: one thread (the rank's compute thread) calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/rng.h"
#include "core/tensor.h"
#include "core/timeline.h"
#include "nn/loss_function.h"
#include "nn/module.h"
#include "nn/params.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/codec.h"
#include "parallel/micro_batches.h"
#include "parallel/state_shard.h"

namespace braid::data {
struct Batch;
}

namespace braid::parallel {

// What every strategy needs to run a step. Strategy-specific options live beside each.
struct StepOptions {
  optim::OptimizerConfig optimizer;
  float clip_grad_norm = 0;  // > 0: clip by global L2 norm (after any reduction)
  float label_smoothing = 0;
  uint64_t seed = 0;  // initial weights and forward randomness (dropout)
  // Micro-batches per step: the batch is cut into this many interleaved slices (rows k,
  // k + m, k + 2m, ...) whose gradients add up before the one update.
  int accumulate_steps = 1;
  // Sum every reduction (micro-batches, then ranks) in a fixed order, so a run equals a
  // run at another world size with the same global batch bit for bit.
  bool deterministic = false;
  // The GEMMs' arithmetic in forward and backward (nn/module.h).
  nn::Precision precision = nn::Precision::fp32;
  // fp16: dynamic loss scaling (optim/loss_scaler.h); a step with an inf or NaN gradient is
  // skipped. Set by precision fp16; the strategies that support it: single and ddp.
  std::optional<optim::LossScalerConfig> loss_scaling;
  // The loss every forward pass ends in (nn/loss_function.h); none: cross-entropy with
  // label_smoothing. Single, DDP (ZeRO included), local SGD and the parameter servers'
  // workers take any; the model-parallel strategies and FedAvg's clients refuse one.
  std::shared_ptr<const nn::LossFunction> loss;
};

// Where a step's time went, in seconds; communication_exposed is the part of the
// communication that compute did not hide (the compute thread waited on it).
struct StepTimes {
  double forward = 0, backward = 0, optimizer = 0, communication_exposed = 0, total = 0;
};

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  virtual std::string_view name() const = 0;  // "single", "ddp", ...
  // One optimizer step on this rank's share of the global batch at learning rate `lr`;
  // `step` (0-based) keys the forward randomness. Returns this rank's mean loss.
  virtual double step(const data::Batch& batch, float lr, int64_t step) = 0;
  // After a checkpoint or weights were loaded into params() on some ranks: make every rank
  // hold them (no-op for one process).
  virtual void sync_parameters() {}
  // Makes every rank hold the same parameters, buffers and optimizer state, where ranks
  // drift apart between exchanges (local SGD); a no-op where they never do. The trainer
  // calls it on every rank before it evaluates or saves, so both see one model.
  virtual void synchronize() {}
  // Applies what a step left pending (DDP under priority scheduling updates each bucket in
  // the next forward): afterwards params() and the optimizer state are every step's. The
  // trainer calls it where it reads the parameters between steps (the weight average);
  // synchronize() and the checkpoint calls imply it.
  virtual void settle() {}
  // values[i] = the sum over ranks of values[i], the same bits on every rank (evaluation
  // tallies, a stop request). Every rank calls it at the same point, between steps.
  // `what` names it in errors ("stop vote", "evaluation tally"); a string literal (kept
  // by pointer).
  virtual void sum_over_ranks(double* values, size_t count, const char* what = "sum over ranks") {
    (void)values;
    (void)count;
    (void)what;
  }
  // sum_over_ranks in two halves, so a step can run between them: start() takes the
  // values (which must stay alive), finish() waits and leaves the sums there. One at a
  // time; every rank starts it at the same point.
  virtual void start_sum_over_ranks(double* values, size_t count, const char* what) {
    (void)values;
    (void)count;
    (void)what;
  }
  virtual void finish_sum_over_ranks() {}
  // A convergence decision (train/stop_rules.h). The trainer calls announce_stop on every
  // rank whose rules fired, after the evaluation that followed `step`; that rank then ends
  // its run. It polls stop_announced() on every rank at every step boundary and ends the run
  // there when it is true. Where every rank evaluates the same summed tallies (single, DDP,
  // local SGD) every rank decides alike at the same step and both stay no-ops; a strategy
  // where only the chief evaluates (parameter servers) carries the chief's announcement to
  // the other ranks and makes their stop_announced() true once it arrives.
  virtual void announce_stop(int64_t step) { (void)step; }
  virtual bool stop_announced() const { return false; }
  // Why stop_announced() is true: empty when the run was judged converged; else why it
  // ends unfinished (a parameter-server worker in sync mode: another worker left the job).
  virtual std::string stop_unfinished_reason() const { return ""; }
  // The run ended well (finished, converged, or stopped at a step boundary with its
  // checkpoint): peers that count on this rank may let it go. A strategy destroyed without
  // it, as an error unwinds, tells such peers that this rank failed (parameter servers).
  virtual void finish() {}
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  // Whether the ranks take their steps in lockstep, so a stop request must be agreed on to
  // land at one step everywhere (the trainer's stop vote); false where each rank runs at
  // its own pace and stops on its own (asynchronous parameter-server workers).
  virtual bool ranks_step_together() const { return true; }
  // Whether this rank evaluates. True on every rank where each evaluates its shard and the
  // tallies are summed; parameter-server workers leave it to the chief (worker 0), which
  // evaluates the whole split alone.
  virtual bool evaluates() const { return true; }
  // State other processes keep for this rank's model (parameter servers' ranges and their
  // optimizer state), written into checkpoint directory `dir` beside what the trainer
  // saves. Called on the rank that writes the checkpoint, before it is complete.
  virtual void save_outside(const std::string& dir) { (void)dir; }
  // Elastic training: from now on, change no parameter and no optimizer state in a step
  // until all of the step's communication succeeded, so that after a step failed on a lost
  // rank the live state is still that of the step before. Returns whether this strategy
  // can (then an in-memory commit need not copy them: Trainer::commit). `on` false goes back
  // to the usual step (benchmarks compare the two).
  virtual bool make_transactional(bool on = true) {
    (void)on;
    return false;
  }
  // Whether every rank holds the same parameters once `steps_done` steps are done (local
  // SGD: only after an average). Elastic training commits only there, so that a commit
  // needs no collective and any rank's is every rank's.
  virtual bool replicas_agree(int64_t steps_done) const {
    (void)steps_done;
    return true;
  }

  // Elastic training of a strategy whose ranks each hold only a share of the state (ZeRO):
  // commits keep shards (parallel/state_shard.h) instead of the whole state. cut_shard
  // copies this rank's share; pass_shard_on sends `mine` to the next rank of the group and
  // receives the previous rank's into `from_left` (collective: every rank calls it).
  virtual bool shards_state() const { return false; }
  virtual void cut_shard(StateShard& into) const;
  // pass_shard_on may return before the exchange is done (ZeRO runs it on its progress
  // thread, beside the next step's forward); finish_passing_shard completes it, `from_left`
  // then whole. Called before the next pass and before the trainer goes; `quietly`: a
  // failed exchange leaves `from_left` empty instead of throwing.
  virtual void pass_shard_on(const StateShard& mine, StateShard& from_left);
  virtual void finish_passing_shard(bool quietly) { (void)quietly; }
  // Elastic training of a strategy that gathers its whole state to rank 0 only for a
  // checkpoint (model parallelism: pipelines, tensor parallelism): with copies on,
  // gather_for_checkpoint() leaves it on rank 1 too, so a commit survives either's loss.
  // holds_gathered_state(): whether optimizer_state() is whole here after the gather.
  virtual void keep_gathered_copy(bool on) { (void)on; }
  virtual bool holds_gathered_state() const { return true; }
  // The names, dtypes and shapes of optimizer_state() in the full logical layout, on every
  // rank (a sharded strategy gathers the state itself on rank 0 only).
  virtual optim::NamedTensors optimizer_state_layout() const { return optimizer_state(); }

  nn::Module& module() { return *module_; }
  nn::ParamSet& params() { return params_; }
  const nn::ParamSet& params() const { return params_; }
  // The optimizer over every parameter, where this rank holds one (a replicated strategy);
  // a sharded one (ZeRO) has none and says so.
  optim::Optimizer& optimizer();
  const optim::Optimizer& optimizer() const;
  // For checkpoints, whatever the strategy holds: the optimizer's name, its state in the
  // full logical layout (read on the rank that saves, after gather_for_checkpoint() on
  // every rank: a sharded strategy gathers it there), and loading such a state (every
  // rank, from the same files; a sharded strategy keeps its share).
  virtual void gather_for_checkpoint() {}
  // Before a checkpoint or weights are loaded into params() on every rank (then
  // sync_parameters()): a strategy without whole parameters (ZeRO stage 3) makes them.
  virtual void prepare_to_load() {}
  virtual std::string_view optimizer_name() const { return optimizer().name(); }
  virtual optim::NamedTensors optimizer_state() const { return optimizer().state(); }
  virtual void load_optimizer_state(const optim::NamedTensors& state) {
    optimizer().load_state(state);
  }
  const StepTimes& last_times() const { return times_; }
  // What the last step's gradient exchange sent (codec.h); zeros where there is none.
  virtual const CodecReport& last_codec_report() const {
    static const CodecReport none;
    return none;
  }
  // fp16's loss scaler (null without loss scaling): its scale and skipped steps.
  const optim::LossScaler* loss_scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  optim::LossScaler* loss_scaler() { return scaler_ ? &*scaler_ : nullptr; }
  const StepOptions& options() const { return options_; }
  // Records forward, backward per reported range, each bucket's communication and the
  // optimizer into `timeline` (null: nothing), which must outlive the strategy's steps.
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }

 protected:
  Strategy(std::unique_ptr<nn::Module> module, StepOptions options);
  // Declares the parameters (once; build() does it when not yet done).
  void declare();
  // Declares the parameters, allocates the buffers (from `allocator` when given), writes
  // the initial values from the seed and builds the optimizer over every parameter (unless
  // the strategy shards it: with_optimizer false).
  void build(const nn::FlatAllocator& allocator = nullptr, bool with_optimizer = true);
  // Forward and loss of micro-batch `micro` (0-based across ranks: it keys the forward
  // randomness, and micro-batch 0 draws what a plain one-process step draws) of step
  // `step`, leaving dL/dlogits x grad_scale for backward(). Returns the mean loss.
  double forward_loss(const data::Batch& b, int64_t step, int64_t micro, float grad_scale);
  // The forward context of micro-batch `micro` of step `step` in training (forward_loss's).
  nn::ForwardContext train_context(int64_t step, int64_t micro) const;
  // Backward from forward_loss's gradient; every range is reported final to the listeners
  // as backward finishes it (the timeline records each as a backward span).
  void backward();
  // Zeroes the gradients, then forward and backward of `micro`'s micro-batches with their
  // gradients added in place, each mean loss counting 1/m. Micro-batch k of rank `rank` of
  // `ranks` is global micro-batch rank + ranks k (its dropout stream, as under DDP).
  // Returns the mean loss.
  double accumulate_micro_batches(const MicroBatches& micro, int64_t step, int rank, int ranks);
  // Clips the gradients by global norm when the options ask, then steps the optimizer over
  // the whole buffer: the update after backward when it cannot be fused into it. Under loss
  // scaling, first: a gradient with an inf or NaN skips the step (the scaler moves the
  // scale), else the gradients are divided by the scale they were computed at.
  void clip_and_step(float lr);
  // The update cannot run range by range during backward (clipping or loss scaling needs
  // the whole gradient first).
  bool update_needs_whole_gradient() const {
    return options_.clip_grad_norm > 0 || scaler_.has_value();
  }

  std::unique_ptr<nn::Module> module_;
  StepOptions options_;
  nn::ParamSet params_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<nn::Cache> cache_;
  Tensor dlogits_;
  StepTimes times_;
  Timeline* timeline_ = nullptr;
  int64_t last_ready_ns_ = 0;  // timeline: the end of forward, then of the last range
  bool declared_ = false;
  std::optional<optim::LossScaler> scaler_;
};

}  // namespace braid::parallel
