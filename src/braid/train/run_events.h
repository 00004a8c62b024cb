// A run's events: what Trainer::run tells the world, as typed records, and the observers
// that listen (the metrics.jsonl writer, the progress line, tests, a dashboard, the elastic
// driver). The trainer publishes each record to a RunEvents hub; an observer overrides the
// on_...() it cares about. Every record's step counts the run's unit (RunStarted::unit):
// optimizer steps, federated rounds, or, for a parameter-server evaluator, the workers'
// steps its updates amount to.
//
// Threads: the trainer publishes from its compute thread, in the order things happen; an
// observer is called there, synchronously, so one that blocks holds the run up. An
// observer that throws fails the run. Observers are shared: a hub keeps them alive.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace braid::train {

struct RunStarted {
  std::string model_kind;  // the module's kind(): "sequential", "gpt", ...
  int64_t parameters = 0;
  int64_t total = 0;   // units the run will reach (0: not known, the evaluator's)
  std::string unit;    // "step", "round" or "update"
  int64_t epochs = 0;  // the configured epochs (the progress line's "epoch 1/3")
  int64_t batch = 0;   // per rank
  int data_ranks = 1;  // ranks that each take a share of the batch
  int world = 1;
  std::string optimizer;
  std::string strategy;
};

// The logged window of units that ended with `step` (every log_every units, and the last).
struct StepDone {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;  // the window's mean
  double lr = 0;
  std::string rate_unit;  // "samples/s" or "tokens/s"
  double rate = 0;
  double step_ms = 0, comm_exposed_ms = 0, data_wait_ms = 0;  // means over the window
  double eta_seconds = 0;                                     // to the run's total at this pace
  double run_seconds = 0;                                     // since the run started
  struct Round {  // federated averaging: the round's work on this worker
    int64_t clients = 0;
    int64_t samples = 0;
  };
  std::optional<Round> round;
  struct LossScale {  // fp16's dynamic loss scaler
    double scale = 0;
    int64_t skipped_steps = 0;
  };
  std::optional<LossScale> loss_scale;
  struct Wire {  // a compressing gradient codec (parallel/codec.h): means over the window
    std::string codec;
    double bytes = 0;       // this rank sent per step
    double ratio = 1;       // an fp32 ring allreduce's bytes / these
    double error_norm = 0;  // the error-feedback memory's L2 norm at the window's end
  };
  std::optional<Wire> wire;
};

struct Evaluated {
  std::string when;  // "step" (eval_every), "epoch" (an epoch's end) or "final"
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  std::optional<double> accuracy;                // classification
  std::optional<double> mse, mae;                // regression (loss mse, l1, huber)
  std::optional<double> label_accuracy;          // multi-label (loss bce_with_logits)
  std::optional<double> bits_per_byte;           // a language model
  std::optional<double> ema_loss, ema_accuracy;  // the weight average's (ema_decay > 0)
  int64_t samples = 0;
  double seconds = 0;              // the evaluation's
  double run_seconds = 0;          // since the run started, this evaluation included
  std::optional<int64_t> updates;  // the evaluator: the servers' updates it scored
};

// A convergence rule fired on an evaluation (train/stop_rules.h).
struct Converged {
  std::string rule;    // "stop.target", ...
  std::string reason;  // one line, for a person
  int64_t step = 0;
};

struct Checkpointed {
  int64_t step = 0;
  std::string dir;
  double seconds = 0;
};

// The job's ranks changed (elastic training): published by whoever drives membership.
struct MembershipChanged {
  int64_t generation = 0;
  int previous_world = 0;
  int world = 0;
  std::string reason;
  int64_t resumed_from_step = 0;
  double ready_seconds = 0;  // from asking for a place to holding the state
  int64_t global_batch = 0;  // the samples of the new world's steps, all ranks together
  // The new world's learning rate over the launch's (elastic.scale_lr: world / launch
  // world; 1 where the launch's global batch is kept).
  double lr_scale = 1;
};

enum class StopHow {
  done,        // reached its end
  converged,   // a stop rule fired here or on another rank ("announced")
  signal,      // a stop request (SIGINT/SIGTERM) at a step boundary
  unfinished,  // ended before its end without converging (a sync job lost a worker)
};
const char* stop_how_name(StopHow how);  // "done", "converged", "signal", "unfinished"

// The last event of a run that returns.
struct Stopped {
  StopHow how = StopHow::done;
  std::string rule;    // converged: the rule's key, or "announced"
  std::string reason;  // unfinished: why; converged: the rule's line where it fired here
  int signal = 0;      // how == signal: the signal number
  int64_t step = 0;
  int64_t total = 0;
  double run_seconds = 0;
  std::string checkpoint_dir;      // empty where the run saves none (the evaluator)
  std::optional<int64_t> updates;  // the evaluator: the servers' updates it scored last
};

// The last event of a run that throws (the error then propagates).
struct Failed {
  int64_t step = 0;
  std::string what;
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_run_started(const RunStarted&) {}
  virtual void on_step_done(const StepDone&) {}
  virtual void on_evaluated(const Evaluated&) {}
  virtual void on_converged(const Converged&) {}
  virtual void on_checkpointed(const Checkpointed&) {}
  virtual void on_membership_changed(const MembershipChanged&) {}
  virtual void on_stopped(const Stopped&) {}
  virtual void on_failed(const Failed&) {}
};

// The hub: observers in the order they subscribed, each record to every one of them.
// Copyable (copies share the observers). Not thread-safe.
class RunEvents {
 public:
  void subscribe(std::shared_ptr<RunObserver> observer);
  const std::vector<std::shared_ptr<RunObserver>>& observers() const { return observers_; }

  void publish(const RunStarted& e) const;
  void publish(const StepDone& e) const;
  void publish(const Evaluated& e) const;
  void publish(const Converged& e) const;
  void publish(const Checkpointed& e) const;
  void publish(const MembershipChanged& e) const;
  void publish(const Stopped& e) const;
  void publish(const Failed& e) const;

 private:
  std::vector<std::shared_ptr<RunObserver>> observers_;
};

}  // namespace braid::train
