// Reading a run's metrics.jsonl into curves: the records braid writes, mixed with events and
// fields the reader does not plot; a resumed run's steps; the errors for a corrupt line, a
// missing run and an empty one; the evaluator's file of a parameter-server job.
#include "report/run_curves.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "temp_dir.h"

namespace braid::report {
namespace {

using braid::testing::TempDir;

std::vector<std::pair<double, double>> pairs(const Series& s) {
  std::vector<std::pair<double, double>> out;
  for (const Point& p : s.points) out.emplace_back(p.x, p.y);
  return out;
}

using Pairs = std::vector<std::pair<double, double>>;

// Lines as braid writes them (train/metrics_observer.cpp), with events and fields the plot
// ignores between them.
const char* const kRun =
    R"({"comm_exposed_ms":1.37,"data_wait_ms":0.0005,"epoch":0,"event":"train","loss":2.25,"lr":0.001,"samples/s":7000.5,"seconds":3.1,"step":100,"step_ms":35.4,"time":1795836606.87}
{"event":"loss_scale","scale":65536,"skipped_steps":0,"step":100}
{"accuracy":0.75,"epoch":0,"event":"eval","loss":0.9,"run_seconds":8.1,"samples":10000,"seconds":0.54,"step":100,"when":"epoch"}

{"codec":"topk","compression_ratio":10.2,"epoch":1,"event":"train","loss":1.5,"lr":0.002,"samples/s":7229.4,"seconds":6.0,"step":200,"wire_bytes":123456,"time":1795836607.0}
{"event":"checkpoint","step":200,"path":"<run>/checkpoint"}
{"event":"train","loss":null,"lr":0.002,"samples/s":7100,"step":250,"future_field":{"nested":[1,2]}}
{"event":"a_future_event","step":"not a number","loss":"x"}
{"accuracy":0.8,"ema_accuracy":0.81,"ema_loss":0.6,"event":"eval","loss":0.7,"step":300}
{"event":"stop","reason":"target reached","rule":"target","step":300}
{"event":"membership","round":2,"world":3,"previous_world":4,"reason":"lost","step":300}
)";

TEST(RunCurves, ReadsTheSeriesOfARealShapedRun) {
  std::istringstream in(kRun);
  const RunCurves c = parse_metrics(in, "run/metrics.jsonl");
  EXPECT_EQ(c.source, "run/metrics.jsonl");
  EXPECT_EQ(c.train_records, 3u);
  EXPECT_EQ(c.eval_records, 2u);
  EXPECT_EQ(c.x_name, "step");
  EXPECT_EQ(pairs(c.train_loss), (Pairs{{100, 2.25}, {200, 1.5}}));  // null skipped
  EXPECT_EQ(pairs(c.lr), (Pairs{{100, 0.001}, {200, 0.002}, {250, 0.002}}));
  EXPECT_EQ(pairs(c.samples_per_s), (Pairs{{100, 7000.5}, {200, 7229.4}, {250, 7100}}));
  EXPECT_TRUE(c.tokens_per_s.empty());
  EXPECT_EQ(pairs(c.eval_loss), (Pairs{{100, 0.9}, {300, 0.7}}));
  EXPECT_EQ(pairs(c.eval_accuracy), (Pairs{{100, 0.75}, {300, 0.8}}));
  EXPECT_EQ(pairs(c.eval_ema_loss), (Pairs{{300, 0.6}}));
  EXPECT_EQ(pairs(c.eval_ema_accuracy), (Pairs{{300, 0.81}}));
}

TEST(RunCurves, ReadsALanguageModelsTokensAndAFederatedRunsRounds) {
  std::istringstream lm(
      R"({"event":"train","loss":3.1,"lr":0.0003,"tokens/s":51234.5,"step":10,"seconds":1}
{"bits_per_byte":1.9,"event":"eval","loss":2.8,"samples":512,"step":10,"run_seconds":2}
)");
  const RunCurves c = parse_metrics(lm, "gpt");
  EXPECT_EQ(pairs(c.tokens_per_s), (Pairs{{10, 51234.5}}));
  EXPECT_TRUE(c.samples_per_s.empty());
  EXPECT_EQ(pairs(c.eval_loss), (Pairs{{10, 2.8}}));
  EXPECT_TRUE(c.eval_accuracy.empty());

  std::istringstream fedavg(
      R"({"clients":4,"event":"train","loss":1.2,"lr":0.1,"round":3,"samples":800,"samples/s":900,"step":3}
)");
  EXPECT_EQ(parse_metrics(fedavg, "fedavg").x_name, "round");
}

// A resumed run logs again the steps after its checkpoint: they replace what was there.
TEST(RunCurves, AResumedRunsStepsReplaceTheOnesItLoggedBefore) {
  std::istringstream in(R"({"event":"train","loss":3,"step":10}
{"event":"train","loss":2,"step":20}
{"event":"train","loss":1.5,"step":30}
{"event":"train","loss":2.1,"step":20}
{"event":"train","loss":1.4,"step":30}
{"event":"train","loss":1.0,"step":40}
)");
  EXPECT_EQ(pairs(parse_metrics(in, "m").train_loss),
            (Pairs{{10, 3}, {20, 2.1}, {30, 1.4}, {40, 1.0}}));
}

TEST(RunCurves, AMalformedLineIsAnErrorNamingTheFileAndTheLine) {
  for (const std::string bad : {"{\"event\":\"train\",\"loss\":", "not json", "42", "[1, 2]"}) {
    std::istringstream in(std::string(R"({"event":"train","loss":3,"step":10}
{"event":"train","loss":2,"step":20}
)") + bad + "\n" + R"({"event":"train","loss":1,"step":30}
)");
    try {
      parse_metrics(in, "runs/x/metrics.jsonl");
      ADD_FAILURE() << "no error for line 3: " << bad;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("runs/x/metrics.jsonl:3: not a JSON object"), std::string::npos) << what;
    }
  }
}

// A process killed as it wrote leaves its last line without a newline: skipped, said.
// The line in the message shows its bytes, none that would upset a terminal.
TEST(RunCurves, TheMalformedLineIsQuotedSafely) {
  std::istringstream in("{\"loss\":\x1b[2J\x01\xff" + std::string(100, 'z') + "\n");
  try {
    parse_metrics(in, "m");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("m:1: not a JSON object: {\"loss\":\\x1b[2J\\x01\\xffzzz"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("zzz..."), std::string::npos) << what;  // cut short
    EXPECT_EQ(what.find('\x1b'), std::string::npos);
  }
}

TEST(RunCurves, ALastLineCutOffMidWriteIsSkippedWithAWarning) {
  std::vector<std::string> logged;
  const LogSink previous =
      set_log_sink([&](LogLevel, const std::string& m) { logged.push_back(m); });
  std::istringstream in(R"({"event":"train","loss":3,"step":10}
{"event":"train","loss":2,"st)");
  const RunCurves c = parse_metrics(in, "m.jsonl");
  set_log_sink(previous);
  EXPECT_EQ(pairs(c.train_loss), (Pairs{{10, 3}}));
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("m.jsonl:2"), std::string::npos) << logged[0];
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string error_of(const std::string& path) {
  try {
    read_run_curves(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(RunCurves, AMissingOrEmptyRunSaysWhatToDo) {
  TempDir tmp;
  const std::string missing = error_of(tmp.file("nope"));
  EXPECT_NE(missing.find(tmp.file("nope")), std::string::npos) << missing;
  EXPECT_NE(missing.find("--out directory"), std::string::npos) << missing;
  EXPECT_THROW(read_run_curves(tmp.file("nope")), IoError);

  const std::string no_metrics = error_of(tmp.path());  // a directory without metrics.jsonl
  EXPECT_NE(no_metrics.find(tmp.file("metrics.jsonl")), std::string::npos) << no_metrics;
  EXPECT_NE(no_metrics.find("--out directory"), std::string::npos) << no_metrics;

  write(tmp.file("metrics.jsonl"), "");
  const std::string empty = error_of(tmp.path());
  EXPECT_NE(empty.find("no train or eval record"), std::string::npos) << empty;
  write(tmp.file("metrics.jsonl"), "{\"event\":\"checkpoint\",\"step\":1}\n");
  EXPECT_NE(error_of(tmp.path()).find("no train or eval record"), std::string::npos);
}

TEST(RunCurves, ReadsAFileNamedDirectly) {
  TempDir tmp;
  write(tmp.file("other.jsonl"), "{\"event\":\"train\",\"loss\":3,\"step\":10}\n");
  const RunCurves c = read_run_curves(tmp.file("other.jsonl"));
  EXPECT_EQ(c.source, tmp.file("other.jsonl"));
  EXPECT_EQ(pairs(c.train_loss), (Pairs{{10, 3}}));
}

// A parameter-server job's evaluator writes its evaluations to evaluator.jsonl.
TEST(RunCurves, TakesTheEvaluationsFromTheEvaluatorsFileWhereTheChiefHasNone) {
  TempDir tmp;
  write(tmp.file("metrics.jsonl"), "{\"event\":\"train\",\"loss\":3,\"step\":10}\n");
  write(tmp.file("evaluator.jsonl"),
        "{\"event\":\"eval\",\"loss\":0.8,\"accuracy\":0.7,\"step\":12,\"updates\":12}\n"
        "{\"event\":\"train\",\"loss\":9,\"step\":12}\n");
  RunCurves c = read_run_curves(tmp.path());
  EXPECT_EQ(pairs(c.train_loss), (Pairs{{10, 3}}));  // the evaluator's train lines are not
  EXPECT_EQ(pairs(c.eval_accuracy), (Pairs{{12, 0.7}}));
  EXPECT_EQ(pairs(c.eval_loss), (Pairs{{12, 0.8}}));

  write(tmp.file("metrics.jsonl"),
        "{\"event\":\"train\",\"loss\":3,\"step\":10}\n"
        "{\"event\":\"eval\",\"loss\":0.5,\"accuracy\":0.9,\"step\":10}\n");
  c = read_run_curves(tmp.path());
  EXPECT_EQ(pairs(c.eval_accuracy), (Pairs{{10, 0.9}}));  // the chief's own
}

}  // namespace
}  // namespace braid::report
