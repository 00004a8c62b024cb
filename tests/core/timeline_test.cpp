// Timeline: the trace parses as JSON in the Trace Event Format, spans nest and order as
// recorded, threads record concurrently without losing or duplicating a span, a full
// timeline drops and counts, a disabled one records nothing, and ranks' files merge onto
// one clock. Times are given explicitly (record with t0/t1 and a fixed origin) wherever a
// value is compared, so nothing depends on how fast the machine runs.
#include "core/timeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "temp_dir.h"

namespace braid {
namespace {

using nlohmann::json;
using testing::TempDir;

constexpr std::int64_t kUs = 1000;  // ns

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return json::parse(in);  // throws on invalid JSON, failing the test
}

// The "X" events of a trace, in file order.
std::vector<json> spans(const json& trace) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") out.push_back(e);
  return out;
}

const json* metadata(const json& trace, const std::string& name, int pid, int tid = 0) {
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == name && e.at("pid") == pid && e.at("tid") == tid)
      return &e;
  return nullptr;
}

TEST(Timeline, DisabledRecordsNothing) {
  TempDir dir;
  Timeline tl;
  EXPECT_FALSE(tl.enabled());
  tl.record(TimelineLane::kCompute, "forward", 0, 10 * kUs);
  { TimelineSpan span(&tl, TimelineLane::kComm, "allreduce", {"bucket", 0}); }
  { TimelineSpan span(nullptr, TimelineLane::kCompute, "no timeline"); }
  EXPECT_EQ(tl.size(), 0u);
  EXPECT_EQ(tl.dropped(), 0u);

  // Stopped after recording: later spans are not kept either.
  tl.start(16, 0);
  tl.record(TimelineLane::kCompute, "kept", 1 * kUs, 2 * kUs);
  tl.stop();
  tl.record(TimelineLane::kCompute, "after stop", 3 * kUs, 4 * kUs);
  { TimelineSpan span(&tl, TimelineLane::kCompute, "after stop"); }
  EXPECT_EQ(tl.size(), 1u);
  tl.write(dir.file("t.json"), 0);
  const std::vector<json> x = spans(read_json(dir.file("t.json")));
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].at("name"), "kept");

  Timeline never_started;
  never_started.write(dir.file("empty.json"), 0);
  EXPECT_TRUE(spans(read_json(dir.file("empty.json"))).empty());
}

TEST(Timeline, WritesTheTraceEventFormat) {
  TempDir dir;
  Timeline tl;
  const std::int64_t origin = 5'000'000;
  tl.start(64, origin);
  tl.record(TimelineLane::kCompute, "backward", origin + 10 * kUs, origin + 25'500, {"layer", 2});
  tl.record(TimelineLane::kComm, "allreduce", origin + 12 * kUs, origin + 40 * kUs, {"bucket", 1},
            {"bytes", 1 << 20});
  tl.record(TimelineLane::kData, "data wait \"quoted\"\n", origin, origin + 3);
  tl.write(dir.file("trace.json"), 3);

  const json trace = read_json(dir.file("trace.json"));
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  const json& other = trace.at("otherData");
  EXPECT_EQ(other.at("rank"), 3);
  EXPECT_EQ(other.at("events"), 3);
  EXPECT_EQ(other.at("dropped_events"), 0);
  EXPECT_EQ(other.at("capacity"), 64);

  const json* process = metadata(trace, "process_name", 3);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->at("args").at("name"), "rank 3");
  for (const auto& [tid, name] : {std::pair{1, "compute"}, {2, "comm"}, {3, "data"}}) {
    const json* thread = metadata(trace, "thread_name", 3, tid);
    ASSERT_NE(thread, nullptr) << name;
    EXPECT_EQ(thread->at("args").at("name"), name);
  }

  const std::vector<json> x = spans(trace);
  ASSERT_EQ(x.size(), 3u);
  // Sorted by start: the data wait (t = 0) first.
  EXPECT_EQ(x[0].at("name"), "data wait \"quoted\"\n");
  EXPECT_DOUBLE_EQ(x[0].at("dur").get<double>(), 0.003);
  EXPECT_EQ(x[0].at("args"), json::object());
  EXPECT_EQ(x[1].at("name"), "backward");
  EXPECT_EQ(x[1].at("cat"), "compute");
  EXPECT_EQ(x[1].at("pid"), 3);
  EXPECT_EQ(x[1].at("tid"), 1);
  EXPECT_DOUBLE_EQ(x[1].at("ts").get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(x[1].at("dur").get<double>(), 15.5);
  EXPECT_EQ(x[1].at("args"), (json{{"layer", 2}}));
  EXPECT_EQ(x[2].at("name"), "allreduce");
  EXPECT_EQ(x[2].at("cat"), "comm");
  EXPECT_EQ(x[2].at("tid"), 2);
  EXPECT_EQ(x[2].at("args"), (json{{"bucket", 1}, {"bytes", 1 << 20}}));
}

// Scoped spans end inner-first, yet the file lists each enclosing span before the spans
// inside it, and each inner span lies within its outer one.
TEST(Timeline, ScopedSpansNestAndOrder) {
  TempDir dir;
  Timeline tl;
  tl.start(64);
  {
    TimelineSpan step(&tl, TimelineLane::kCompute, "step");
    {
      TimelineSpan fwd(&tl, TimelineLane::kCompute, "forward");
      for (int layer = 0; layer < 3; ++layer)
        TimelineSpan l(&tl, TimelineLane::kCompute, "layer", {"layer", layer});
    }
    TimelineSpan bwd(&tl, TimelineLane::kCompute, "backward");
  }
  // Same start, different lengths: the longer one encloses, so it comes first.
  const std::int64_t t = Timeline::now();
  tl.record(TimelineLane::kCompute, "inner", t, t + 1 * kUs);
  tl.record(TimelineLane::kCompute, "outer", t, t + 5 * kUs);
  tl.write(dir.file("t.json"), 0);

  const std::vector<json> x = spans(read_json(dir.file("t.json")));
  std::vector<std::string> names;
  for (const json& e : x) names.push_back(e.at("name"));
  EXPECT_EQ(names, (std::vector<std::string>{"step", "forward", "layer", "layer", "layer",
                                             "backward", "outer", "inner"}));
  auto begin = [](const json& e) { return e.at("ts").get<double>(); };
  auto end = [](const json& e) { return e.at("ts").get<double>() + e.at("dur").get<double>(); };
  for (std::size_t i = 1; i < 6; ++i) {
    EXPECT_GE(begin(x[i]), begin(x[0]));
    EXPECT_LE(end(x[i]), end(x[0]) + 1e-9);
    EXPECT_GE(begin(x[i]), begin(x[i - 1]));
  }
  for (std::size_t i = 2; i < 5; ++i) {
    EXPECT_EQ(x[i].at("args").at("layer"), static_cast<int>(i) - 2);
    EXPECT_GE(begin(x[i]), begin(x[1]));
    EXPECT_LE(end(x[i]), end(x[1]) + 1e-9);
  }
  EXPECT_GE(begin(x[5]), end(x[1]) - 1e-9);  // backward after forward
}

// The compute thread and progress threads record at once: every span is kept exactly once.
TEST(Timeline, ConcurrentThreadsKeepEverySpan) {
  TempDir dir;
  constexpr int kThreads = 4, kEach = 5000;
  Timeline tl;
  tl.start(kThreads * kEach);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&tl, &ready, t] {
      const TimelineLane lane = t == 0 ? TimelineLane::kCompute : TimelineLane::kComm;
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // all at once, to contend
      for (int i = 0; i < kEach; ++i) {
        if (i % 100 == 0) {
          TimelineSpan span(&tl, lane, "span", {"thread", t}, {"i", i});
        } else {
          tl.record(lane, "op", i, i + 1, {"thread", t}, {"i", i});
        }
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(tl.size(), static_cast<std::size_t>(kThreads * kEach));
  EXPECT_EQ(tl.dropped(), 0u);
  tl.write(dir.file("t.json"), 1);

  const std::vector<json> x = spans(read_json(dir.file("t.json")));
  ASSERT_EQ(x.size(), static_cast<std::size_t>(kThreads * kEach));
  std::set<std::pair<int, int>> seen;
  for (const json& e : x) {
    const int t = e.at("args").at("thread"), i = e.at("args").at("i");
    EXPECT_EQ(e.at("name"), i % 100 == 0 ? "span" : "op");
    EXPECT_EQ(e.at("tid"), t == 0 ? 1 : 2);
    EXPECT_TRUE(seen.insert({t, i}).second) << "span " << t << "/" << i << " twice";
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kThreads * kEach));
}

// write() while another thread records: a valid file with the spans finished by then.
TEST(Timeline, WriteWhileRecording) {
  TempDir dir;
  Timeline tl;
  tl.start(4096);  // fills up soon; the recorder goes on, dropping
  std::atomic<bool> stop{false};
  std::atomic<int> recorded{0};
  std::thread recorder([&] {
    while (!stop.load()) {
      TimelineSpan span(&tl, TimelineLane::kComm, "allreduce");
      recorded.fetch_add(1);
    }
  });
  while (recorded.load() < 100) std::this_thread::yield();
  tl.write(dir.file("a.json"), 0);
  stop.store(true);
  recorder.join();
  const std::size_t written = spans(read_json(dir.file("a.json"))).size();
  EXPECT_GE(written, 99u);  // the span whose count was seen may still have been in flight
  EXPECT_LE(written, tl.size());
}

TEST(Timeline, FullTimelineDropsAndCounts) {
  TempDir dir;
  Timeline tl;
  tl.start(10, 0);
  for (int i = 0; i < 25; ++i) tl.record(TimelineLane::kCompute, "op", i * kUs, i * kUs + 1);
  EXPECT_EQ(tl.size(), 10u);
  EXPECT_EQ(tl.dropped(), 15u);
  tl.write(dir.file("t.json"), 2);
  const json trace = read_json(dir.file("t.json"));
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), 15);
  EXPECT_EQ(spans(trace).size(), 10u);
  const json* label = metadata(trace, "process_labels", 2);
  ASSERT_NE(label, nullptr);
  EXPECT_NE(label->at("args").at("labels").get<std::string>().find("dropped 15"),
            std::string::npos);

  // From several threads at once: exactly capacity kept, the rest counted.
  tl.start(100);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&tl] {
      for (int i = 0; i < 50; ++i) TimelineSpan span(&tl, TimelineLane::kComm, "op");
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(tl.size(), 100u);
  EXPECT_EQ(tl.dropped(), 100u);

  // start() again clears both.
  tl.start(100);
  EXPECT_EQ(tl.size(), 0u);
  EXPECT_EQ(tl.dropped(), 0u);
  EXPECT_THROW(tl.start(0), Error);
  EXPECT_THROW(tl.start(Timeline::kMaxCapacity + 1), Error);
}

TEST(Timeline, WriteReplacesAtomicallyAndNamesBadPaths) {
  TempDir dir;
  Timeline tl;
  tl.start(8, 0);
  tl.record(TimelineLane::kCompute, "first", 0, 1);
  tl.write(dir.file("t.json"), 0);
  tl.record(TimelineLane::kCompute, "second", 2, 3);
  tl.write(dir.file("t.json"), 0);
  EXPECT_EQ(spans(read_json(dir.file("t.json"))).size(), 2u);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"t.json"});  // no temporary left behind
  try {
    tl.write(dir.file("missing/t.json"), 0);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/t.json"), std::string::npos) << e.what();
  }
}

// Two ranks that started 1 ms apart: the merged trace has both processes on one clock.
TEST(Timeline, MergesRanksOntoOneClock) {
  TempDir dir;
  const std::string path = dir.file("trace.json");
  EXPECT_EQ(rank_trace_path(path, 1), dir.file("trace.rank1.json"));
  EXPECT_EQ(rank_trace_path("trace", 0), "trace.rank0");

  const std::int64_t origin = Timeline::now();
  Timeline r0, r1;
  r0.start(4, origin);
  r1.start(2, origin + 1000 * kUs);
  r0.record(TimelineLane::kCompute, "forward", origin + 10 * kUs, origin + 20 * kUs);
  r1.record(TimelineLane::kCompute, "forward", origin + 1000 * kUs + 5 * kUs,
            origin + 1000 * kUs + 7 * kUs);
  r1.record(TimelineLane::kComm, "allreduce", origin + 1010 * kUs, origin + 1030 * kUs,
            {"bucket", 0});
  r1.record(TimelineLane::kComm, "dropped", origin, origin);  // the third in 2 slots
  r0.write(rank_trace_path(path, 0), 0);
  r1.write(rank_trace_path(path, 1), 1);
  // In ts, rank 1's spans are relative to its own origin, 1 ms after rank 0's.
  EXPECT_DOUBLE_EQ(spans(read_json(rank_trace_path(path, 1)))[0].at("ts").get<double>(), 5.0);

  merge_rank_traces(path, 2);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"trace.json"});  // per-rank files removed
  const json merged = read_json(path);
  EXPECT_EQ(merged.at("otherData").at("events"), 3);
  EXPECT_EQ(merged.at("otherData").at("dropped_events"), 1);
  ASSERT_NE(metadata(merged, "process_name", 0), nullptr);
  ASSERT_NE(metadata(merged, "process_name", 1), nullptr);
  EXPECT_EQ(metadata(merged, "process_name", 1)->at("args").at("name"), "rank 1");
  std::vector<std::tuple<int, std::string, double, double>> got;
  for (const json& e : spans(merged))
    got.emplace_back(e.at("pid"), e.at("name"), e.at("ts"), e.at("dur"));
  EXPECT_EQ(got, (std::vector<std::tuple<int, std::string, double, double>>{
                     {0, "forward", 10.0, 10.0},
                     {1, "forward", 1005.0, 2.0},
                     {1, "allreduce", 1010.0, 20.0}}));

  // A merged trace merges again; anything else is refused with its name.
  const std::string again = dir.file("again.json");
  merge_traces({path}, again);
  EXPECT_EQ(spans(read_json(again)).size(), 3u);
  std::ofstream(dir.file("other.json")) << R"({"traceEvents":[]})";
  try {
    merge_traces({path, dir.file("other.json")}, dir.file("x.json"));
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("other.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(merge_rank_traces(dir.file("absent.json"), 1), IoError);
}

}  // namespace
}  // namespace braid
