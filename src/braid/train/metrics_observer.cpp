#include "train/metrics_observer.h"

#include <chrono>

namespace braid::train {

MetricsObserver::MetricsObserver(const std::string& path) : log_(path) {}

void MetricsObserver::on_run_started(const RunStarted& e) { unit_ = e.unit; }

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void MetricsObserver::on_step_done(const StepDone& e) {
  nlohmann::json rec = {{"event", "train"}, {"step", e.step},      {"loss", e.loss},
                        {"lr", e.lr},       {e.rate_unit, e.rate}, {"seconds", e.run_seconds}};
  // Wall-clock (Unix seconds): lines the ranks of changing rounds write can be put in order,
  // and against events outside the job (a kill, in bench/elastic_recovery.sh).
  rec["time"] = unix_seconds();
  if (e.round) {
    rec["round"] = e.step;
    rec["clients"] = e.round->clients;
    rec["samples"] = e.round->samples;
  } else {
    rec["epoch"] = e.epoch;
    // The step split: compute, communication compute did not hide, and waiting for data.
    rec["step_ms"] = e.step_ms;
    rec["comm_exposed_ms"] = e.comm_exposed_ms;
    rec["data_wait_ms"] = e.data_wait_ms;
  }
  if (e.wire) {
    rec["codec"] = e.wire->codec;
    rec["wire_bytes"] = e.wire->bytes;
    rec["compression_ratio"] = e.wire->ratio;
    rec["error_feedback_norm"] = e.wire->error_norm;
  }
  emit(rec);
  if (e.loss_scale)
    emit({{"event", "loss_scale"},
          {"step", e.step},
          {"scale", e.loss_scale->scale},
          {"skipped_steps", e.loss_scale->skipped_steps}});
}

void MetricsObserver::on_evaluated(const Evaluated& e) {
  nlohmann::json rec = {{"event", "eval"},
                        {"step", e.step},
                        {"loss", e.loss},
                        {"samples", e.samples},
                        {"run_seconds", e.run_seconds}};
  if (unit_ == "round") {
    rec["round"] = e.step;
  } else {
    rec["seconds"] = e.seconds;
    if (e.updates) rec["updates"] = *e.updates;
    if (unit_ == "step") {
      rec["when"] = e.when;
      rec["epoch"] = e.epoch;
    }
  }
  if (e.accuracy) rec["accuracy"] = *e.accuracy;
  if (e.mse) rec["mse"] = *e.mse;
  if (e.mae) rec["mae"] = *e.mae;
  if (e.label_accuracy) rec["label_accuracy"] = *e.label_accuracy;
  if (e.bits_per_byte) rec["bits_per_byte"] = *e.bits_per_byte;
  if (e.ema_loss) rec["ema_loss"] = *e.ema_loss;
  if (e.ema_accuracy) rec["ema_accuracy"] = *e.ema_accuracy;
  emit(rec);
}

void MetricsObserver::on_converged(const Converged& e) {
  emit({{"event", "stop"}, {"rule", e.rule}, {"reason", e.reason}, {"step", e.step}});
}

void MetricsObserver::on_membership_changed(const MembershipChanged& e) {
  emit({{"event", "membership"},
        {"round", e.generation},
        {"world", e.world},
        {"previous_world", e.previous_world},
        {"reason", e.reason},
        {"step", e.resumed_from_step},
        {"ready_seconds", e.ready_seconds},
        {"global_batch", e.global_batch},
        {"lr_scale", e.lr_scale},
        {"time", unix_seconds()}});
}

}  // namespace braid::train
