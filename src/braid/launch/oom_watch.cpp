// OomWatch: reads the kernel log non-blocking from the position taken at start, one record
// per read() as /dev/kmsg returns them; EPIPE means records were overwritten while we
// waited and reading simply goes on.
#include "launch/oom_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace braid::launch {
namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return s.str();
}

std::optional<int64_t> read_count(const std::string& path) {
  const std::optional<std::string> text = read_text(path);
  return text ? parse_oom_kill_count(*text) : std::nullopt;
}

}  // namespace

std::optional<int64_t> parse_oom_kill_count(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string key = "oom_kill ";
    if (line.compare(0, key.size(), key) != 0) continue;
    int64_t v = 0;
    size_t i = key.size();
    if (i >= line.size()) return std::nullopt;
    for (; i < line.size(); ++i) {
      if (line[i] < '0' || line[i] > '9' || v > INT64_MAX / 10 - 9) return std::nullopt;
      v = v * 10 + (line[i] - '0');
    }
    return v;
  }
  return std::nullopt;
}

bool record_reports_oom_kill(const std::string& record, pid_t pid) {
  const std::string p = std::to_string(pid);
  if (record.find("Killed process " + p + " ") != std::string::npos) return true;
  const size_t summary = record.find("oom-kill:");
  if (summary == std::string::npos) return false;
  const std::string field = ",pid=" + p;
  for (size_t at = record.find(field, summary); at != std::string::npos;
       at = record.find(field, at + 1)) {
    const size_t end = at + field.size();
    if (end == record.size() || record[end] < '0' || record[end] > '9') return true;
  }
  return false;
}

std::vector<std::string> oom_counter_candidates(const std::string& proc_cgroup_text,
                                                const std::string& cgroup_root) {
  std::vector<std::string> v1, v2;
  std::istringstream in(proc_cgroup_text);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (path == "/") path.clear();
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2.push_back(cgroup_root + path + "/memory.events");
      v2.push_back(cgroup_root + "/unified" + path + "/memory.events");
    } else {
      std::istringstream names(controllers);
      for (std::string name; std::getline(names, name, ',');)
        if (name == "memory") v1.push_back(cgroup_root + "/memory" + path + "/memory.oom_control");
    }
  }
  // A v1 memory controller, where mounted, is the one that accounts memory.
  v1.insert(v1.end(), v2.begin(), v2.end());
  return v1;
}

OomWatch::OomWatch(const std::string& cgroup_root, const std::string& proc_cgroup,
                   const std::string& kmsg) {
  if (const std::optional<std::string> text = read_text(proc_cgroup))
    for (const std::string& path : oom_counter_candidates(*text, cgroup_root))
      if (const std::optional<int64_t> count = read_count(path)) {
        counter_path_ = path;
        count_before_ = count;
        break;
      }
  kmsg_fd_ = ::open(kmsg.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (kmsg_fd_ >= 0 && ::lseek(kmsg_fd_, 0, SEEK_END) < 0) {
    ::close(kmsg_fd_);
    kmsg_fd_ = -1;
  }
}

OomWatch::~OomWatch() {
  if (kmsg_fd_ >= 0) ::close(kmsg_fd_);
}

std::string OomWatch::explain_sigkill(pid_t pid) {
  // The kernel log names the very process: the strongest record, read first.
  bool log_read = false, in_log = false;
  if (kmsg_fd_ >= 0) {
    char buf[8192];
    while (true) {
      const ssize_t n = ::read(kmsg_fd_, buf, sizeof buf);
      if (n > 0) {
        log_read = true;
        in_log = in_log || record_reports_oom_kill(std::string(buf, static_cast<size_t>(n)), pid);
      } else if (n < 0 && (errno == EPIPE || errno == EINTR)) {
        continue;
      } else {
        log_read = log_read || n == 0 || errno == EAGAIN;
        break;
      }
    }
  }
  const std::string p = std::to_string(pid);
  if (in_log)
    return "The kernel's OOM killer is the likely cause: the kernel log says it killed process " +
           p + " (dmesg); the ranks on this host need less memory (smaller sizes, fewer ranks)";
  const std::optional<int64_t> after =
      counter_path_.empty() ? std::nullopt : read_count(counter_path_);
  if (after && count_before_ && *after > *count_before_)
    return "The kernel's OOM killer is the likely cause: oom_kill in " + counter_path_ +
           " rose from " + std::to_string(*count_before_) + " to " + std::to_string(*after) +
           " during the job; the ranks on this host need less memory (smaller sizes, fewer ranks)";
  std::string checked;
  if (log_read) checked = "no OOM kill of process " + p + " in the kernel log";
  if (after)
    checked += (checked.empty() ? "" : ", ") +
               ("oom_kill in " + counter_path_ + " unchanged at " + std::to_string(*after));
  if (!checked.empty())
    return "SIGKILL comes from another process or from the kernel's OOM killer when memory runs "
           "out; the OOM killer left no record (" +
           checked + "), so another process probably sent it";
  return "SIGKILL often means the kernel's OOM killer (memory ran out), or another process "
         "sent it; neither the kernel log nor a cgroup memory counter could be read here, so "
         "look for 'Killed process " +
         p + "' in `dmesg` or `journalctl -k`";
}

}  // namespace braid::launch
