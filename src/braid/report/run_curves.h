// A finished (or running) run's curves, read from its metrics.jsonl: the series `braid
// plot` draws, each a list of (step, value) points. Records other than "train" and "eval",
// fields not plotted, and values that are not finite numbers (a NaN loss is written as
// null) or lie past +-1e150 are skipped, so new fields or events never break the reader.
// A line that is not a JSON object is an error naming the file and the line, except a last
// line cut off mid-write (no newline: the process was killed as it wrote), which is
// skipped with a warning.
//
// A resumed run appends to the same file and logs again the steps after its checkpoint; a
// point at a step at or before the series' last one replaces every point from that step
// on, so each series holds the run as it stands, its steps strictly increasing.
#pragma once

#include <istream>
#include <string>
#include <vector>

namespace braid::report {

struct Point {
  double x = 0;
  double y = 0;
};

struct Series {
  std::string name;  // what a legend says: "train loss", "samples/s", ...
  std::vector<Point> points;

  // Adds (x, y) under the resume rule above.
  void add(double x, double y);
  bool empty() const { return points.empty(); }
};

struct RunCurves {
  std::string source;  // the file the records came from, for messages
  Series train_loss{"train loss", {}};
  Series eval_loss{"eval loss", {}};
  Series eval_ema_loss{"eval loss (EMA)", {}};  // the weight average's (ema_decay)
  Series eval_accuracy{"eval accuracy", {}};
  Series eval_ema_accuracy{"eval accuracy (EMA)", {}};
  Series samples_per_s{"samples/s", {}};  // the training rate, one key or the other
  Series tokens_per_s{"tokens/s", {}};    // (language models count tokens)
  Series lr{"learning rate", {}};
  std::string x_name = "step";  // "round" for federated averaging, whose rounds are steps
  size_t train_records = 0;
  size_t eval_records = 0;
};

// Reads `in` (named `source` in errors) into the curves. Throws braid::Error for a line
// that is not a JSON object.
RunCurves parse_metrics(std::istream& in, const std::string& source);

// Reads RUN_DIR/metrics.jsonl, or the file itself where `path` names a file. Where it has
// no eval record and RUN_DIR/evaluator.jsonl exists (a parameter-server job's evaluator
// writes there), the eval curves come from that file. Throws IoError for a missing or
// unreadable file (saying what to pass instead) and braid::Error for a malformed line or
// a run with no train or eval record.
RunCurves read_run_curves(const std::string& path);

}  // namespace braid::report
