// Elastic membership: who is in a job that loses and gains ranks while it runs.
//
// The processes of an elastic job meet in rounds. A process asks to be in round R by
// appending "member:commit_step" to the store key elastic/round/R/asks (an atomic append
// through compare_set), then waits for elastic/round/R/members. A coordinator (braid
// launch's, beside the store it hosts, so that any rank may die) closes the round once
// every member of round R-1 that is still alive has asked, or once the round has been
// open for the rendezvous timeout (then the members that did not ask are named, for the
// launcher to stop). Rank i of round R is the i-th listed member: the members of R-1 first,
// in their old order, then newcomers in the order they asked. The round also names its
// source: the first member holding the newest commit, from which every member takes the
// training state (a newcomer has none; a survivor may be one step behind another).
//
// A newcomer asking while a round runs sets elastic/pending to the round it asked for; the
// members look at it at a commit and, once they agree, regroup into that round with it.
// A process left out of a round it asked for (it asked just after the round closed, or the
// job is full) asks for the next one.
//
// Keys live under the store the caller passes (a job's prefixed store). Every call is a
// few store operations; none holds a lock across calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/deadline.h"
#include "comm/store.h"

namespace braid::comm {

// The value of `key` now, "" when absent; never waits (a compare_set that never matches).
std::string read_now(Store& store, const std::string& key);
// Appends `separator` + `item` to `key` (just `item` when absent) atomically: two processes
// appending at once both land.
void append(Store& store, const std::string& key, const std::string& item,
            const std::string& separator = " ");

// A commit step of a process that holds no training state (a newcomer).
inline constexpr int64_t kNoCommit = -1;

struct Round {
  int64_t number = 0;
  int rank = -1;  // this process's rank in the round
  std::vector<std::string> members;
  int source = 0;  // rank holding the newest commit: everyone takes the state from it
  int64_t source_step = kNoCommit;
  // The job trained to its end before this process got a place: it has nothing to do.
  bool finished = false;
  int world() const { return static_cast<int>(members.size()); }
};

// Asks for round `number` (0: the next one to close) and waits until a round this member
// is listed in closes; a round that closed without it makes it ask for the next. Throws
// Error when the coordinator failed the round (too few members left: the reason is in the
// message), TimeoutError at `deadline`.
// `give_up`, looked at every 100 ms of the wait, ends it with an Error saying so (a stop
// request: the process must not sit out its launcher's grace period in here).
Round join_round(Store& store, const std::string& member, int64_t number, int64_t commit_step,
                 Deadline deadline, const std::function<bool()>& give_up = {});

// The newest round a newcomer asked for while the members trained, or 0: members that see
// it regroup into it at their next commit. One store operation.
int64_t pending_round(Store& store);

// Said by a member that leaves the job before round `number` (it exits): the coordinator
// counts it gone rather than waiting for it.
void leave_round(Store& store, const std::string& member, int64_t number);

// Said by a member once the job trained to its end: a process asking later is told so.
void mark_finished(Store& store, int64_t step);

struct RoundRules {
  int min_members = 1;
  int max_members = 1 << 20;
  // How long a round may wait for a member of the previous round that is alive but has not
  // asked (stopped, hung, cut off) before it closes without it.
  std::chrono::milliseconds rendezvous_timeout{10000};
  // A job over several hosts: the host (node) a member runs on, empty for a member of no
  // node (a process started by hand), and the fewest nodes a round may span. `nodes_flag`
  // names the setting in the failure ("--nnodes 2:4").
  std::function<std::string(const std::string&)> node_of;
  int min_nodes = 0;
  std::string nodes_flag = "--nnodes";
};

// What the coordinator knows of a member from outside the store: its process is alive,
// gone, or unknown (a process the launcher did not start). A member known to be gone has
// no place in a round, even when it asked before it died.
enum class Liveness { alive, gone, unknown };

struct ClosedRound {
  int64_t number = 0;
  std::vector<std::string> members;
  std::vector<std::string> left_out;  // members of the last round, alive, that never asked
  std::string failed;                 // nonempty: the round could not form (too few members)
  bool finished = false;              // the job had already finished: the askers are told so
};

// The coordinator's side. Not thread-safe: one thread polls it (braid launch's supervision
// loop). `initial` are the members expected in round 1.
class RoundCoordinator {
 public:
  RoundCoordinator(std::shared_ptr<Store> store, RoundRules rules,
                   std::vector<std::string> initial);

  // One look at the open round: closes it when it is complete (or timed out) and returns
  // what it decided; nullopt when nothing closed. `arriving`: processes started for the
  // job (restarts) that have not asked yet; a round short of min_members waits for them
  // (within the rendezvous timeout) instead of failing.
  std::optional<ClosedRound> poll(const std::function<Liveness(const std::string&)>& liveness,
                                  const std::vector<std::string>& arriving = {});

  int64_t round() const { return round_; }  // the last round closed (0: none yet)
  const std::vector<std::string>& members() const { return members_; }

 private:
  std::shared_ptr<Store> store_;
  RoundRules rules_;
  int64_t round_ = 0;
  std::vector<std::string> members_;  // of round_ (round 0: the initial members)
  // How many distinct nodes `members` run on (0 without rules_.node_of).
  int count_nodes(const std::vector<std::string>& members) const;

  std::optional<std::chrono::steady_clock::time_point> opened_;
  int64_t pending_set_ = 0;
};

}  // namespace braid::comm
