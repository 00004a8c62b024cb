#include "report/run_curves.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace braid::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The number under `key`, or NaN where it is absent, null or not a number.
double number(const json& rec, const char* key) {
  const auto it = rec.find(key);
  if (it == rec.end() || !it->is_number()) return std::nan("");
  return it->get<double>();
}

// Past this a value is no metric braid writes (float32 ends at 3.4e38); kept out so an
// axis' span stays finite.
constexpr double kLargest = 1e150;

void add_if_finite(Series& s, double x, double y) {
  if (std::abs(x) <= kLargest && std::abs(y) <= kLargest) s.add(x, y);  // false for NaN
}

// A line shortened for a message, its bytes other than printable ASCII as \xNN.
std::string excerpt(const std::string& line) {
  constexpr size_t kMax = 60;
  std::string out;
  for (size_t i = 0; i < line.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += line[i];
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return line.size() <= kMax ? out : out + "...";
}

void add_record(RunCurves& c, const json& rec) {
  const auto event = rec.find("event");
  if (event == rec.end() || !event->is_string()) return;
  const double step = number(rec, "step");
  if (*event == "train") {
    ++c.train_records;
    if (rec.contains("round")) c.x_name = "round";
    add_if_finite(c.train_loss, step, number(rec, "loss"));
    add_if_finite(c.lr, step, number(rec, "lr"));
    add_if_finite(c.samples_per_s, step, number(rec, "samples/s"));
    add_if_finite(c.tokens_per_s, step, number(rec, "tokens/s"));
  } else if (*event == "eval") {
    ++c.eval_records;
    add_if_finite(c.eval_loss, step, number(rec, "loss"));
    add_if_finite(c.eval_ema_loss, step, number(rec, "ema_loss"));
    add_if_finite(c.eval_accuracy, step, number(rec, "accuracy"));
    add_if_finite(c.eval_ema_accuracy, step, number(rec, "ema_accuracy"));
  }
}

std::ifstream open_or_throw(const std::string& file, const std::string& hint) {
  std::ifstream in(file);
  if (!in) BRAID_THROW(IoError, "cannot read '", file, "': ", std::strerror(errno), hint);
  return in;
}

}  // namespace

void Series::add(double x, double y) {
  while (!points.empty() && points.back().x >= x) points.pop_back();
  points.push_back({x, y});
}

RunCurves parse_metrics(std::istream& in, const std::string& source) {
  RunCurves c;
  c.source = source;
  size_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json rec = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!rec.is_object()) {
      if (in.eof()) {  // no newline after it: cut off mid-write
        log_warn(source, ":", line_no, ": skipped, cut off mid-write: ", excerpt(line));
        break;
      }
      BRAID_THROW(Error, source, ":", line_no, ": not a JSON object: ", excerpt(line),
                  " (each line of a metrics file is one JSON record; the file is corrupt)");
    }
    add_record(c, rec);
  }
  if (in.bad()) BRAID_THROW(IoError, "cannot read '", source, "': read error");
  return c;
}

RunCurves read_run_curves(const std::string& path) {
  const bool is_file = fs::is_regular_file(path);
  const fs::path dir = is_file ? fs::path(path).parent_path() : fs::path(path);
  const std::string file = is_file ? path : (dir / "metrics.jsonl").string();
  if (!is_file && !fs::is_directory(path))
    BRAID_THROW(IoError, "no run directory '", path,
                "': pass the --out directory of a `braid train` run (or its metrics.jsonl)");
  std::ifstream in =
      open_or_throw(file, is_file ? "" : "; is this the --out directory of a `braid train` run?");
  RunCurves c = parse_metrics(in, file);
  const fs::path evaluator = dir / "evaluator.jsonl";
  if (c.eval_records == 0 && !is_file && fs::is_regular_file(evaluator)) {
    std::ifstream ein = open_or_throw(evaluator.string(), "");
    RunCurves e = parse_metrics(ein, evaluator.string());
    c.eval_loss = std::move(e.eval_loss);
    c.eval_ema_loss = std::move(e.eval_ema_loss);
    c.eval_accuracy = std::move(e.eval_accuracy);
    c.eval_ema_accuracy = std::move(e.eval_ema_accuracy);
    c.eval_records = e.eval_records;
  }
  if (c.train_records + c.eval_records == 0)
    BRAID_THROW(Error, file,
                " holds no train or eval record yet: nothing to plot (a run logs every "
                "--log-every steps and evaluates every --eval-every)");
  return c;
}

}  // namespace braid::report
