// EventStreamObserver: every event of a run on one rank, one JSON object a line, for a
// process that follows the file while the run goes (braid worker, which streams it to the
// job server and its dashboard). The records are metrics.jsonl's ("train", "eval", "stop",
// "membership"), written by every rank, not only the one that writes outputs, plus the
// run's edges: "started" (the run's shape), "checkpoint", "stopped" and "failed" (the last
// line of a run that ended or threw). Each record carries "rank" and "time" (Unix seconds),
// so the server can tell each rank's health from its last line.
//
// braid train writes it where BRAID_EVENTS_DIR says (rank-<R>.jsonl there), appended and
// flushed a line at a time (a reader never sees half a record but at the file's end).
#pragma once

#include <string>

#include "train/metrics_observer.h"

namespace braid::train {

class EventStreamObserver : public MetricsObserver {
 public:
  EventStreamObserver(const std::string& path, int rank);

  void on_run_started(const RunStarted& e) override;
  void on_checkpointed(const Checkpointed& e) override;
  void on_stopped(const Stopped& e) override;
  void on_failed(const Failed& e) override;

 protected:
  void emit(nlohmann::json record) override;

 private:
  int rank_;
};

// "<dir>/rank-<rank>.jsonl": where a rank's stream goes under BRAID_EVENTS_DIR.
std::string event_stream_path(const std::string& dir, int rank);

}  // namespace braid::train
