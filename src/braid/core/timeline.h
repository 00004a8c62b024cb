// A recorder of timed spans (forward, backward per layer, each bucket's allreduce, the
// optimizer) written as a Chrome trace: the JSON Trace Event Format that Perfetto
// (ui.perfetto.dev) and chrome://tracing open, one "X" (complete) event per span, with
// pid = rank and one thread lane per role (compute, comm, data), so a user sees where
// communication overlaps computation.
//
// Cost: a Timeline starts disabled and then costs one load and a branch per span
// (a TimelineSpan over a null Timeline* costs one branch). start(capacity) allocates every
// slot up front; recording claims a slot with one atomic increment and writes it, so the
// hot path takes no lock and allocates nothing. When the slots run out, further spans are
// dropped and counted; the count is written into the file ("otherData.dropped_events" and
// a label on the rank's process).
//
// Names, categories and argument keys are `const char*` that must outlive the Timeline
// (string literals): a span stores the pointers, never copies.
//
// Thread safety: record(), TimelineSpan and the accessors may run concurrently from any
// number of threads, stop() too. start() and the destructor must not overlap any recording (call
// start() before the threads that record begin, or while they are quiet). write() may run
// while others record: it writes the spans finished by then.
//
// Clock: steady_clock nanoseconds (Timeline::now()). Events hold microseconds since the
// origin given to start(), default now. Several ranks on one host share steady_clock, so
// merge_traces() lines their files up exactly from the origins each file carries; across
// hosts it falls back to the system-clock origin (as good as the hosts' clock sync).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid {

// The thread lane a span is drawn on (its "tid" in the trace).
enum class TimelineLane : std::uint8_t {
  kCompute = 1,  // forward, backward, optimizer: the training thread
  kComm = 2,     // collectives, as the progress thread runs them
  kData = 3,     // waiting for the loader
};
const char* lane_name(TimelineLane lane);

// One optional integer argument of a span: {"layer", 3}, {"bucket", 0}, {"bytes", n}.
// key == nullptr means none.
struct TimelineArg {
  const char* key = nullptr;
  std::int64_t value = 0;
};

class Timeline {
 public:
  // A slot is one 64-byte cache line: 2^18 slots are 16 MiB, some thousands of steps.
  static constexpr std::size_t kDefaultCapacity = std::size_t{1} << 18;
  static constexpr std::size_t kMaxCapacity = std::size_t{1} << 24;

  Timeline();
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // steady_clock, nanoseconds: the timestamps record() takes.
  static std::int64_t now();

  // Clears what was recorded, preallocates `capacity` spans (1..kMaxCapacity, else
  // braid::Error) and enables recording. Times are measured from `origin_ns` (a now()
  // value; default now): ranks that pass the same origin, e.g. taken after a barrier,
  // need no shifting when merged.
  void start(std::size_t capacity = kDefaultCapacity, std::int64_t origin_ns = -1);
  // Disables recording; what was recorded stays for write().
  void stop() { enabled_.store(false, std::memory_order_relaxed); }
  // Acquire (a plain load on x86): a thread that sees true also sees what start() set up.
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }

  // A span from t0_ns to t1_ns (now() values), e.g. an allreduce the progress thread
  // started at t0 and finished at t1. Nothing happens while disabled.
  void record(TimelineLane lane, const char* name, std::int64_t t0_ns, std::int64_t t1_ns,
              TimelineArg a = {}, TimelineArg b = {}) {
    if (!enabled()) return;
    record_enabled(lane, name, t0_ns, t1_ns, a, b);
  }

  // Spans recorded and kept so far; spans dropped because every slot was taken.
  std::size_t size() const;
  std::size_t dropped() const;
  std::size_t capacity() const { return capacity_; }

  // Writes the trace of `rank` (pid = rank, process "rank N") to `path` atomically: a
  // temporary file beside it, then rename, so a reader never sees half a file.
  // Throws IoError naming the path.
  void write(const std::string& path, int rank) const;

 private:
  struct Slot;
  void record_enabled(TimelineLane lane, const char* name, std::int64_t t0_ns, std::int64_t t1_ns,
                      TimelineArg a, TimelineArg b);

  std::atomic<bool> enabled_{false};
  std::atomic<std::size_t> next_{0};  // slots claimed, may run past capacity_
  std::unique_ptr<Slot[]> slots_;
  std::size_t capacity_ = 0;
  std::int64_t origin_ns_ = 0;
  std::int64_t origin_system_ns_ = 0;  // system_clock at origin_ns_, for other hosts
};

// Records [construction, destruction) on `timeline`'s `lane` unless timeline is null or
// disabled. Not copyable; lives on the recording thread's stack.
class TimelineSpan {
 public:
  TimelineSpan(Timeline* timeline, TimelineLane lane, const char* name, TimelineArg a = {},
               TimelineArg b = {})
      : timeline_(timeline != nullptr && timeline->enabled() ? timeline : nullptr),
        name_(name),
        a_(a),
        b_(b),
        lane_(lane) {
    if (timeline_) t0_ = Timeline::now();
  }
  ~TimelineSpan() {
    if (timeline_) timeline_->record(lane_, name_, t0_, Timeline::now(), a_, b_);
  }
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  Timeline* timeline_;
  const char* name_;
  TimelineArg a_;
  TimelineArg b_;
  std::int64_t t0_ = 0;
  TimelineLane lane_;
};

// Merges trace files written by Timeline::write (one per rank) into one trace at `out`
// (atomically), shifting each file's times onto the earliest origin: exactly when all
// files come from one host, by the system clock otherwise. The dropped counts are summed
// into the merged file's otherData. Throws IoError naming the file that cannot be read or
// is not a Timeline trace.
void merge_traces(const std::vector<std::string>& inputs, const std::string& out);

// "run/trace.json" -> "run/trace.rank3.json": where rank 3 writes its part of `path`.
std::string rank_trace_path(const std::string& path, int rank);
// Rank 0's end of a run: merges rank_trace_path(path, r) for r in [0, world_size) into
// `path`, then removes the per-rank files.
void merge_rank_traces(const std::string& path, int world_size);

}  // namespace braid
