// One rank as `braid launch` supervises it (launch/supervisor.h): its process, its place
// in the job, how it ended and what the launcher did to it; and the words the launcher's
// messages use for ranks and times.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launch/child_process.h"
#include "launch/launcher.h"
#include "launch/output_prefixer.h"

namespace braid::launch {

struct Rank {
  ChildProcess proc;
  int slot = 0;           // the rank it was started as (a restart keeps its slot)
  int incarnation = 0;    // restarts of this slot before this process
  std::string member;     // elastic jobs: its id in the membership rounds
  bool absorbed = false;  // elastic jobs: its failure did not stop the job
  bool exited = false;
  int code = 0;    // exit code, when signal == 0
  int signal = 0;  // the signal that killed it
  std::unique_ptr<OutputPrefixer> out, err;
  bool running_at_stop = false;  // still running when the launcher began stopping the job
  bool sent_sigkill = false;     // the launcher sent it SIGKILL while it ran
  bool stranded = false;         // a ps worker left running after every server finished
  char state_at_failure = 0;     // its /proc state when the job's first failure came
  std::chrono::steady_clock::time_point exited_at;

  bool failed() const { return signal != 0 || code != 0; }
  // Died of the launcher's SIGKILL, rather than exiting (or dying) before it landed.
  bool killed_by_launcher() const { return sent_sigkill && signal == SIGKILL; }
  std::string how() const {
    if (signal != 0)
      return "was killed by signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
    return "exited with code " + std::to_string(code);
  }
};

// "NAME=..." for one of `names`.
bool starts_with_any(const std::string& entry, const std::vector<std::string>& names);
// "1.500" (seconds, three decimals).
std::string format_seconds(std::chrono::nanoseconds ns);
// The state letter of /proc/<pid>/stat ('R', 'S', 'T' for stopped, ...); 0 if unreadable.
char process_state(pid_t pid);
// "1 rank", "3 ranks".
std::string ranks_word(int n);
// "rank 3", "ranks 0, 1, 2", or the first few and a count for a large job.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace braid::launch
