// Why did a rank die of SIGKILL? Either another process sent it or the kernel's OOM
// killer chose the rank, and the user's next step differs (find the sender, or use less
// memory), so the launcher says which the system's records support.
//
// Two records, each read only when readable: the kernel log (/dev/kmsg, what dmesg
// reads; refused to unprivileged users when kernel.dmesg_restrict=1), read from where it
// ended when the watch began, for "Killed process <pid>"; and the oom_kill counter of
// the launcher's memory cgroup (cgroup v2 memory.events, v1 memory.oom_control), which
// counts every OOM kill of a process in it, before and after.
//
// Not thread-safe; one per launch.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace braid::launch {

class OomWatch {
 public:
  // Snapshots the counter and moves to the end of the kernel log. `cgroup_root` and
  // `kmsg` exist for tests; unreadable paths just mean that record is not consulted.
  explicit OomWatch(const std::string& cgroup_root = "/sys/fs/cgroup",
                    const std::string& proc_cgroup = "/proc/self/cgroup",
                    const std::string& kmsg = "/dev/kmsg");
  ~OomWatch();
  OomWatch(const OomWatch&) = delete;
  OomWatch& operator=(const OomWatch&) = delete;

  // One sentence for the user about process `pid`, just killed by SIGKILL: the OOM
  // killer is the likely cause only when a record says so.
  std::string explain_sigkill(pid_t pid);

 private:
  std::string counter_path_;  // empty: no readable cgroup counter
  std::optional<int64_t> count_before_;
  int kmsg_fd_ = -1;
};

// The N of an "oom_kill N" line (memory.events, memory.oom_control); nullopt if none.
std::optional<int64_t> parse_oom_kill_count(const std::string& text);

// Whether one kernel log record reports that the OOM killer killed `pid` ("Killed
// process 123 (braid)", or the "oom-kill:...,pid=123,..." summary line).
bool record_reports_oom_kill(const std::string& record, pid_t pid);

// Files that may hold this process's cgroup oom_kill counter, most specific first, from
// the text of /proc/self/cgroup: v2 "0::/path" -> root/path/memory.events, v1
// "N:...memory...:/path" -> root/memory/path/memory.oom_control.
std::vector<std::string> oom_counter_candidates(const std::string& proc_cgroup_text,
                                                const std::string& cgroup_root);

}  // namespace braid::launch
