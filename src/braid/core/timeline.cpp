// Timeline: slots, the trace file format and merging.
//
// The file is JSON laid out one event per line so that merge_traces() can shift times
// without a JSON library in core/ (it reads only files this code wrote):
//   {"displayTimeUnit":"ms","otherData":{...},
//   "traceEvents":[
//   {"name":"process_name","ph":"M",...},          metadata lines start with {"name":
//   {"ts":12.345,"dur":6.000,"ph":"X",...},         span lines start with {"ts":
//   ]}
// ts and dur are microseconds with three decimals (exact nanoseconds).
#include "core/timeline.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace braid {

// One span; a cache line each, so threads recording side by side never share a line.
struct alignas(64) Timeline::Slot {
  const char* name;
  std::int64_t t0_ns;
  std::int64_t dur_ns;
  TimelineArg a;
  TimelineArg b;
  TimelineLane lane;
  // Set (release) after the fields above: write() reads only committed slots (acquire),
  // so it may run while other threads are still recording.
  std::atomic<bool> committed;
};

namespace {

constexpr const char* kFormat = "braid-timeline";
constexpr int kVersion = 1;

std::string errno_text() { return std::strerror(errno); }

// Identifies the steady clock: processes with the same kernel boot id read the same
// CLOCK_MONOTONIC (containers on one machine included); else the hostname.
std::string clock_domain() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (in && std::getline(in, id) && !id.empty()) return id;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

// Nanoseconds as microseconds with three decimals: -1500 -> "-1.500".
void append_us(std::string& out, std::int64_t ns) {
  if (ns < 0) out += '-';
  const std::uint64_t mag =
      ns < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%llu.%03llu", static_cast<unsigned long long>(mag / 1000),
                static_cast<unsigned long long>(mag % 1000));
  out += buf;
}

// The inverse of append_us; false unless `s` is exactly [-]digits[.ddd].
bool parse_us(std::string_view s, std::int64_t& ns) {
  bool neg = false;
  if (!s.empty() && s[0] == '-') {
    neg = true;
    s.remove_prefix(1);
  }
  const std::size_t dot = s.find('.');
  const std::string_view whole = s.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  if (whole.empty() || frac.size() > 3) return false;
  std::int64_t w = 0, f = 0;
  auto [p, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), w);
  if (ec != std::errc() || p != whole.data() + whole.size()) return false;
  if (!frac.empty()) {
    auto [q, ec2] = std::from_chars(frac.data(), frac.data() + frac.size(), f);
    if (ec2 != std::errc() || q != frac.data() + frac.size()) return false;
    for (std::size_t i = frac.size(); i < 3; ++i) f *= 10;
  }
  if (w > std::numeric_limits<std::int64_t>::max() / 1000 - 1) return false;
  ns = w * 1000 + f;
  if (neg) ns = -ns;
  return true;
}

void append_int(std::string& out, std::int64_t v) { out += std::to_string(v); }

// ,"key":value
void append_int_field(std::string& out, const char* key, std::int64_t v) {
  out += ",\"";
  out += key;
  out += "\":";
  append_int(out, v);
}

// Replaces `path` with `text` atomically: a temporary file in the same directory (so the
// rename stays on one file system), flushed to disk, then renamed over `path`.
void write_atomically(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0)
    BRAID_THROW(IoError, "timeline: cannot create a temporary file beside '", path,
                "': ", errno_text(), " (does the directory exist and is it writable?)");
  ::fchmod(fd, 0644);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = errno_text();
      ::close(fd);
      ::unlink(temp.c_str());
      BRAID_THROW(IoError, "timeline: cannot write '", temp, "': ", reason);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string reason = errno_text();
    ::unlink(temp.c_str());
    BRAID_THROW(IoError, "timeline: cannot flush '", temp, "': ", reason);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = errno_text();
    ::unlink(temp.c_str());
    BRAID_THROW(IoError, "timeline: cannot rename '", temp, "' to '", path, "': ", reason);
  }
}

// The otherData fields of a trace file, written and read back by merge_traces.
struct Header {
  int rank = 0;
  std::string clock;
  std::int64_t origin_steady_ns = 0;
  std::int64_t origin_system_ns = 0;
  std::int64_t capacity = 0;
  std::int64_t events = 0;
  std::int64_t dropped = 0;
};

void append_header(std::string& out, const Header& h) {
  out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"";
  out += kFormat;
  out += "\",\"version\":";
  append_int(out, kVersion);
  append_int_field(out, "rank", h.rank);
  out += ",\"clock\":";
  append_escaped(out, h.clock);
  append_int_field(out, "origin_steady_ns", h.origin_steady_ns);
  append_int_field(out, "origin_system_ns", h.origin_system_ns);
  append_int_field(out, "capacity", h.capacity);
  append_int_field(out, "events", h.events);
  append_int_field(out, "dropped_events", h.dropped);
  out += "},\n\"traceEvents\":[\n";
}

void append_metadata(std::string& out, const char* name, int pid, int tid, const char* key,
                     std::string_view value) {
  out += "{\"name\":\"";
  out += name;
  out += "\",\"ph\":\"M\",\"pid\":";
  append_int(out, pid);
  append_int_field(out, "tid", tid);
  out += ",\"args\":{\"";
  out += key;
  out += "\":";
  append_escaped(out, value);
  out += "}},\n";
}

void append_metadata(std::string& out, const char* name, int pid, int tid, std::int64_t index) {
  out += "{\"name\":\"";
  out += name;
  out += "\",\"ph\":\"M\",\"pid\":";
  append_int(out, pid);
  append_int_field(out, "tid", tid);
  out += ",\"args\":{\"sort_index\":";
  append_int(out, index);
  out += "}},\n";
}

// Removes the ",\n" after the last event and closes the array and the object.
void close_events(std::string& out) {
  if (out.size() >= 2 && out.compare(out.size() - 2, 2, ",\n") == 0) out.resize(out.size() - 2);
  out += "\n]}\n";
}

[[noreturn]] void not_a_trace(const std::string& path, const std::string& why) {
  BRAID_THROW(IoError, "timeline: '", path, "' is not a braid timeline trace (", why,
              "); merge only files that Timeline::write or merge_traces wrote");
}

// The value after "key": in the header line, up to the next ',' or '}'.
std::string_view header_field(const std::string& path, std::string_view line,
                              std::string_view key) {
  std::string needle;  // built by append: GCC 12 misreads operator+ here (-Wrestrict)
  needle.reserve(key.size() + 3);
  needle.append(1, '"').append(key).append("\":");
  const std::size_t at = line.find(needle);
  if (at == std::string_view::npos) not_a_trace(path, "no " + std::string(key) + " in its header");
  const std::size_t from = at + needle.size();
  std::size_t to = from;
  if (to < line.size() && line[to] == '"') {
    to = line.find('"', to + 1);
    if (to == std::string_view::npos) not_a_trace(path, "unterminated " + std::string(key));
    return line.substr(from + 1, to - from - 1);
  }
  while (to < line.size() && line[to] != ',' && line[to] != '}') ++to;
  return line.substr(from, to - from);
}

std::int64_t header_int(const std::string& path, std::string_view line, std::string_view key) {
  const std::string_view v = header_field(path, line, key);
  std::int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size())
    not_a_trace(path, std::string(key) + " is not an integer");
  return out;
}

struct TraceFile {
  Header header;
  std::vector<std::string> events;  // one event each, without the trailing comma
};

TraceFile read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) BRAID_THROW(IoError, "timeline: cannot open '", path, "': ", errno_text());
  TraceFile t;
  std::string line;
  if (!std::getline(in, line) || line.rfind("{\"displayTimeUnit\"", 0) != 0)
    not_a_trace(path, "its first line is not the header");
  if (header_field(path, line, "format") != kFormat) not_a_trace(path, "another format");
  if (header_int(path, line, "version") != kVersion)
    not_a_trace(path, "version " + std::string(header_field(path, line, "version")) +
                          ", this braid reads version " + std::to_string(kVersion));
  Header& h = t.header;
  h.rank = static_cast<int>(header_int(path, line, "rank"));
  h.clock = std::string(header_field(path, line, "clock"));
  h.origin_steady_ns = header_int(path, line, "origin_steady_ns");
  h.origin_system_ns = header_int(path, line, "origin_system_ns");
  h.capacity = header_int(path, line, "capacity");
  h.events = header_int(path, line, "events");
  h.dropped = header_int(path, line, "dropped_events");
  if (!std::getline(in, line) || line != "\"traceEvents\":[")
    not_a_trace(path, "no traceEvents line");
  bool closed = false;
  while (std::getline(in, line)) {
    if (line == "]}") {
      closed = true;
      break;
    }
    if (line.empty()) continue;
    if (line.back() == ',') line.pop_back();
    if (line.front() != '{' || line.back() != '}') not_a_trace(path, "an event is not one line");
    t.events.push_back(std::move(line));
  }
  if (!closed) not_a_trace(path, "truncated: no closing ]}");
  return t;
}

// Adds `shift_ns` to the ts of a span line ({"ts":...); metadata lines stay as they are.
std::string shifted(const std::string& path, const std::string& event, std::int64_t shift_ns) {
  static constexpr std::string_view kTs = "{\"ts\":";
  if (shift_ns == 0 || event.rfind(kTs, 0) != 0) return event;
  const std::size_t end = event.find(',', kTs.size());
  std::int64_t ts = 0;
  if (end == std::string::npos ||
      !parse_us(std::string_view(event).substr(kTs.size(), end - kTs.size()), ts))
    not_a_trace(path, "a span's ts is not microseconds with three decimals");
  std::string out(kTs);
  append_us(out, ts + shift_ns);
  out.append(event, end, std::string::npos);
  return out;
}

}  // namespace

const char* lane_name(TimelineLane lane) {
  switch (lane) {
    case TimelineLane::kCompute:
      return "compute";
    case TimelineLane::kComm:
      return "comm";
    case TimelineLane::kData:
      return "data";
  }
  return "other";
}

Timeline::Timeline() = default;
Timeline::~Timeline() = default;

std::int64_t Timeline::now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Timeline::start(std::size_t capacity, std::int64_t origin_ns) {
  static_assert(sizeof(Slot) == 64, "a slot is one cache line");
  BRAID_CHECK(capacity >= 1 && capacity <= kMaxCapacity, "timeline capacity ", capacity,
              " is out of range: give 1 to ", kMaxCapacity, " spans");
  enabled_.store(false, std::memory_order_relaxed);
  if (capacity != capacity_) {
    slots_.reset();  // the old array first: never two of them at once
    slots_ = std::make_unique<Slot[]>(capacity);
    capacity_ = capacity;
  }
  for (std::size_t i = 0; i < capacity_; ++i)
    slots_[i].committed.store(false, std::memory_order_relaxed);
  next_.store(0, std::memory_order_relaxed);
  const std::int64_t steady = now();
  const std::int64_t system = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  origin_ns_ = origin_ns >= 0 ? origin_ns : steady;
  origin_system_ns_ = system - (steady - origin_ns_);
  // Release: a thread that sees enabled also sees the cleared slots and origin.
  enabled_.store(true, std::memory_order_release);
}

void Timeline::record_enabled(TimelineLane lane, const char* name, std::int64_t t0_ns,
                              std::int64_t t1_ns, TimelineArg a, TimelineArg b) {
  const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= capacity_) return;  // dropped: counted by next_ running past capacity_
  Slot& s = slots_[i];
  s.name = name;
  s.t0_ns = t0_ns;
  s.dur_ns = t1_ns > t0_ns ? t1_ns - t0_ns : 0;
  s.a = a;
  s.b = b;
  s.lane = lane;
  s.committed.store(true, std::memory_order_release);
}

std::size_t Timeline::size() const {
  return std::min(next_.load(std::memory_order_relaxed), capacity_);
}

std::size_t Timeline::dropped() const {
  const std::size_t n = next_.load(std::memory_order_relaxed);
  return n > capacity_ ? n - capacity_ : 0;
}

void Timeline::write(const std::string& path, int rank) const {
  std::vector<const Slot*> spans;
  spans.reserve(size());
  for (std::size_t i = 0, n = size(); i < n; ++i)
    if (slots_[i].committed.load(std::memory_order_acquire)) spans.push_back(&slots_[i]);
  // By start time, an enclosing span before the spans it contains (longer first).
  std::stable_sort(spans.begin(), spans.end(), [](const Slot* x, const Slot* y) {
    if (x->t0_ns != y->t0_ns) return x->t0_ns < y->t0_ns;
    return x->dur_ns > y->dur_ns;
  });
  bool used[4] = {};
  for (const Slot* s : spans) used[static_cast<int>(s->lane) & 3] = true;

  Header h;
  h.rank = rank;
  h.clock = clock_domain();
  h.origin_steady_ns = origin_ns_;
  h.origin_system_ns = origin_system_ns_;
  h.capacity = static_cast<std::int64_t>(capacity_);
  h.events = static_cast<std::int64_t>(spans.size());
  h.dropped = static_cast<std::int64_t>(dropped());

  std::string out;
  out.reserve(512 + spans.size() * 160);
  append_header(out, h);
  append_metadata(out, "process_name", rank, 0, "name", "rank " + std::to_string(rank));
  append_metadata(out, "process_sort_index", rank, 0, rank);
  if (h.dropped > 0)
    append_metadata(out, "process_labels", rank, 0, "labels",
                    "dropped " + std::to_string(h.dropped) + " spans: the timeline holds " +
                        std::to_string(capacity_) + "; give it a larger capacity");
  for (const TimelineLane lane :
       {TimelineLane::kCompute, TimelineLane::kComm, TimelineLane::kData}) {
    const int tid = static_cast<int>(lane);
    if (!used[tid]) continue;
    append_metadata(out, "thread_name", rank, tid, "name", lane_name(lane));
    append_metadata(out, "thread_sort_index", rank, tid, tid);
  }
  for (const Slot* s : spans) {
    out += "{\"ts\":";
    append_us(out, s->t0_ns - origin_ns_);
    out += ",\"dur\":";
    append_us(out, s->dur_ns);
    out += ",\"ph\":\"X\",\"pid\":";
    append_int(out, rank);
    append_int_field(out, "tid", static_cast<int>(s->lane));
    out += ",\"cat\":\"";
    out += lane_name(s->lane);
    out += "\",\"name\":";
    append_escaped(out, s->name ? s->name : "");
    out += ",\"args\":{";
    bool first = true;
    for (const TimelineArg* arg : {&s->a, &s->b}) {
      if (!arg->key) continue;
      if (!first) out += ',';
      first = false;
      append_escaped(out, arg->key);
      out += ':';
      append_int(out, arg->value);
    }
    out += "}},\n";
  }
  close_events(out);
  write_atomically(path, out);
}

void merge_traces(const std::vector<std::string>& inputs, const std::string& out) {
  BRAID_CHECK(!inputs.empty(), "merge_traces: no input files to merge into '", out, "'");
  std::vector<TraceFile> files;
  files.reserve(inputs.size());
  for (const std::string& path : inputs) files.push_back(read_trace(path));
  // One steady clock for all: shift exactly by the steady origins; else by system time.
  bool same_clock = true;
  for (const TraceFile& f : files)
    same_clock = same_clock && f.header.clock == files[0].header.clock;
  auto origin = [&](const TraceFile& f) {
    return same_clock ? f.header.origin_steady_ns : f.header.origin_system_ns;
  };
  std::size_t first = 0;  // the file that started first: its origin becomes the merged one
  for (std::size_t i = 1; i < files.size(); ++i)
    if (origin(files[i]) < origin(files[first])) first = i;
  Header merged = files[first].header;
  merged.rank = -1;
  merged.capacity = merged.events = merged.dropped = 0;
  for (const TraceFile& f : files) {
    merged.capacity += f.header.capacity;
    merged.events += f.header.events;
    merged.dropped += f.header.dropped;
  }
  if (!same_clock) merged.clock = "system";
  const std::int64_t base = origin(files[first]);
  std::string text;
  append_header(text, merged);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::int64_t shift = origin(files[i]) - base;
    for (const std::string& e : files[i].events) {
      text += shifted(inputs[i], e, shift);
      text += ",\n";
    }
  }
  close_events(text);
  write_atomically(out, text);
}

std::string rank_trace_path(const std::string& path, int rank) {
  const std::filesystem::path p(path);
  std::string name = p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string();
  return (p.parent_path() / name).string();
}

void merge_rank_traces(const std::string& path, int world_size) {
  BRAID_CHECK(world_size >= 1, "merge_rank_traces: world size ", world_size, " is not >= 1");
  std::vector<std::string> inputs;
  inputs.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) inputs.push_back(rank_trace_path(path, r));
  merge_traces(inputs, path);
  for (const std::string& p : inputs) std::filesystem::remove(p);
}

}  // namespace braid
