#include "train/event_stream_observer.h"

#include <chrono>
#include <utility>

namespace braid::train {
namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

EventStreamObserver::EventStreamObserver(const std::string& path, int rank)
    : MetricsObserver(path), rank_(rank) {}

void EventStreamObserver::emit(nlohmann::json record) {
  record["rank"] = rank_;
  if (!record.contains("time")) record["time"] = unix_seconds();
  MetricsObserver::emit(std::move(record));
}

void EventStreamObserver::on_run_started(const RunStarted& e) {
  MetricsObserver::on_run_started(e);
  emit({{"event", "started"},
        {"model", e.model_kind},
        {"parameters", e.parameters},
        {"total", e.total},
        {"unit", e.unit},
        {"epochs", e.epochs},
        {"batch", e.batch},
        {"world", e.world},
        {"optimizer", e.optimizer},
        {"strategy", e.strategy}});
}

void EventStreamObserver::on_checkpointed(const Checkpointed& e) {
  emit({{"event", "checkpoint"}, {"step", e.step}, {"dir", e.dir}, {"seconds", e.seconds}});
}

void EventStreamObserver::on_stopped(const Stopped& e) {
  nlohmann::json rec = {{"event", "stopped"},
                        {"how", stop_how_name(e.how)},
                        {"step", e.step},
                        {"total", e.total},
                        {"run_seconds", e.run_seconds}};
  if (!e.reason.empty()) rec["reason"] = e.reason;
  emit(rec);
}

void EventStreamObserver::on_failed(const Failed& e) {
  emit({{"event", "failed"}, {"step", e.step}, {"what", e.what}});
}

std::string event_stream_path(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".jsonl";
}

}  // namespace braid::train
