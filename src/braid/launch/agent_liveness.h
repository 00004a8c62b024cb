// Which members of a multi-host elastic job are alive, as the job's coordinator learns it
// from the agents (`braid launch --nnodes`): one agent per host starts that host's members,
// and tells the coordinator about them through the store, under its node index:
//
//   elastic/agents/<node>/report   "beat B [done]\nlive M M ...\ngone M M ..."
//   elastic/agents/<node>/orders   lines the coordinator appends: "kill M", "lost REASON"
//
// An agent rewrites its report every heartbeat (B grows each time) and at once when one of
// its members dies, so a death its agent saw costs the coordinator no timeout. The
// coordinator (AgentLiveness) counts a member alive while its agent's beat keeps changing;
// an agent whose beat has not changed for the silence limit (its host died, its link was
// cut, it hangs) is lost for good: every member it had is gone, and it is told so.
//
// Member ids of such a job are "node.slot.incarnation" (node_of_member reads the node).
// Clocks are the coordinator's alone: a beat is a counter, never a time, so hosts need no
// synchronised clocks. Not thread-safe: one thread (the coordinator's) uses an AgentLiveness.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/membership.h"
#include "comm/store.h"

namespace braid::launch {

using AgentClock = std::chrono::steady_clock;

struct AgentReport {
  int64_t beat = 0;               // grows with every report: the agent's sign of life
  bool done = false;              // the agent has exited: none of its members runs
  std::vector<std::string> live;  // its members whose processes run
  std::vector<std::string> gone;  // its members that exited or died, over the whole job
};

std::string format_agent_report(const AgentReport& report);
// Error naming what is malformed.
AgentReport parse_agent_report(const std::string& text);

std::string agent_report_key(int node);
std::string agent_orders_key(int node);

// "2.0.1" -> "2": the node of a member an agent started; "" for any other id (a process
// started by hand, a single-host launch's "slot.incarnation").
std::string node_of_member(const std::string& member);

class AgentLiveness {
 public:
  explicit AgentLiveness(std::chrono::milliseconds silence_limit);

  // A remote agent of the job, heard from (joined the nodes' rendezvous) at `now`.
  void expect(int node, AgentClock::time_point now);
  // What was read of `node`'s report at `now` (nullopt: nothing yet).
  void observe(int node, const std::optional<AgentReport>& report, AgentClock::time_point now);
  // Reads every expected agent's report from `store` and observes it.
  void read_reports(comm::Store& store, AgentClock::time_point now);

  // The agents that went silent past the limit since the last call, each named once with
  // why ("no report for 2.0 s"); from now on their members are gone.
  std::vector<std::pair<int, std::string>> newly_lost(AgentClock::time_point now);

  // alive (its agent listed it live), gone (its agent reported it gone, is done or lost),
  // unknown (not a remote agent's member, or not listed yet).
  comm::Liveness of(const std::string& member) const;

  // Every expected agent has exited or is lost.
  bool all_ended() const;
  // Agents neither done nor lost.
  int running() const;
  // Some agent exited by itself (said done).
  bool any_done() const;

 private:
  struct Agent {
    int64_t beat = -1;
    AgentClock::time_point heard;  // when its beat last changed
    bool done = false;
    bool lost = false;
    std::vector<std::string> live, gone;
  };
  std::chrono::milliseconds silence_limit_;
  std::map<std::string, Agent> agents_;  // by node, as node_of_member spells it
};

}  // namespace braid::launch
