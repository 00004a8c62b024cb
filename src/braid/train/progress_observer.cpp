#include "train/progress_observer.h"

#include "core/error.h"
#include "train/stop_signal.h"

namespace braid::train {

void ProgressObserver::on_run_started(const RunStarted& e) {
  unit_ = e.unit;
  total_ = e.total;
  epochs_ = e.epochs;
}

void ProgressObserver::on_step_done(const StepDone& e) {
  if (e.round) {
    progress_.update(detail::concat("round ", e.step, "/", total_, "  loss ", e.loss, "  ",
                                    e.round->clients, " clients here"));
    return;
  }
  const std::string wire =
      e.wire ? detail::concat("  ", e.wire->codec, " ",
                              static_cast<int64_t>(e.wire->ratio * 10) / 10.0, "x fewer bytes")
             : std::string();
  progress_.update(detail::concat("epoch ", e.epoch + 1, "/", epochs_, "  step ", e.step, "/",
                                  total_, "  loss ", e.loss, "  ", static_cast<int64_t>(e.rate),
                                  " ", e.rate_unit, wire, "  ETA ",
                                  format_duration(e.eta_seconds)));
}

void ProgressObserver::on_evaluated(const Evaluated& e) {
  std::string line =
      detail::concat("eval  ", unit_ == "round" ? "round " : "step ", e.step, "  loss ", e.loss);
  if (e.accuracy) line += detail::concat("  accuracy ", *e.accuracy);
  if (e.mse) line += detail::concat("  mse ", *e.mse);
  if (e.mae) line += detail::concat("  mae ", *e.mae);
  if (e.label_accuracy) line += detail::concat("  label accuracy ", *e.label_accuracy);
  if (e.ema_loss) line += detail::concat("  ema loss ", *e.ema_loss);
  if (e.ema_accuracy) line += detail::concat("  ema accuracy ", *e.ema_accuracy);
  progress_.print(line);
}

void ProgressObserver::on_converged(const Converged& e) { progress_.print(e.reason); }

void ProgressObserver::on_stopped(const Stopped& e) {
  const std::string took = format_duration(e.run_seconds);
  if (unit_ == "update") {
    progress_.print(
        detail::concat("evaluator done after ", e.updates.value_or(0), " updates in ", took));
    return;
  }
  if (unit_ == "round") {
    const std::string how = e.how == StopHow::signal
                                ? detail::concat("stopped by ", signal_name(e.signal))
                            : e.how == StopHow::converged ? "converged (" + e.rule + ")"
                                                          : std::string("done");
    progress_.print(detail::concat(how, ": ", e.step, " rounds in ", took, "; checkpoint in ",
                                   e.checkpoint_dir));
    return;
  }
  const std::string& dir = e.checkpoint_dir;
  switch (e.how) {
    case StopHow::unfinished:
      progress_.print(detail::concat("unfinished at step ", e.step, "/", e.total, ": ", e.reason,
                                     "; checkpoint in ", dir));
      break;
    case StopHow::signal:
      progress_.print(detail::concat("stopped by ", signal_name(e.signal), " at step ", e.step, "/",
                                     e.total, ": checkpoint in ", dir,
                                     "; continue with: braid train --resume ", dir));
      break;
    case StopHow::converged:
      progress_.print(detail::concat("converged (", e.rule, ") at step ", e.step, "/", e.total,
                                     " in ", took, "; checkpoint in ", dir));
      break;
    case StopHow::done:
      progress_.print(
          detail::concat("done: ", e.step, " steps in ", took, "; checkpoint in ", dir));
      break;
  }
}

}  // namespace braid::train
