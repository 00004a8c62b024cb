// What the fault tests of real `braid launch` jobs share: a guard that turns a hang into a
// failure, waiting for a rank to compute, and assertions on the output.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

#include "launch/braid_process.h"

namespace braid::testing {

// Kills `pid` with SIGKILL unless stop() comes within `limit`; fired() says whether it did.
class HangGuard {
 public:
  HangGuard(pid_t pid, std::chrono::seconds limit)
      : thread_([this, pid, limit] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return stopped_; })) {
            fired_ = true;
            ::kill(pid, SIGKILL);
          }
        }) {}
  ~HangGuard() { stop(); }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  bool fired() {
    stop();
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  bool fired_ = false;
  std::thread thread_;
};

// User plus system CPU time of `pid` in clock ticks; -1 once it cannot be read.
inline long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  long utime = 0, stime = 0;
  if (std::sscanf(text.c_str() + close + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld",
                  &utime, &stime) != 2)
    return -1;
  return utime + stime;
}

// Waits until `pid` has spent `ticks` more of CPU on training: the progress line comes
// just before rank 0's per-step stop vote, so a fault right after it would land in the
// vote ("sum over ranks"); some compute later it lands at a point of the step not tied to
// the vote, almost always while the other rank waits in the gradient allreduce.
inline void let_it_compute(pid_t pid, long ticks) {
  const long start = cpu_ticks(pid);
  for (long now = start; now >= 0 && now < start + ticks; now = cpu_ticks(pid))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// The pid a rank printed as "[who] pid N" ("worker 1", "ps 0"; ranks run through
// `sh -c 'echo pid $$; exec ...'`), after waiting for its line; 0 if the output ended first.
inline pid_t pid_of(Process& p, const std::string& who) {
  const std::string tag = "[" + who + "] pid ";
  if (!p.wait_for(tag)) return 0;
  int pid = 0;
  const std::string& out = p.output();
  if (std::sscanf(out.c_str() + out.find(tag) + tag.size(), "%d", &pid) != 1) return 0;
  return pid;
}

inline std::string last_line(const std::string& output) {
  const size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = output.rfind('\n', end);
  return output.substr(begin == std::string::npos ? 0 : begin + 1, end - begin);
}

inline ::testing::AssertionResult has_text(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  text:  " << text << "\n  lacks: " << part;
}

}  // namespace braid::testing
