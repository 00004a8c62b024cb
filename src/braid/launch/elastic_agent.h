// The elastic side of `braid launch`'s supervision: what an agent does for an elastic job
// beyond running its local ranks (launcher.cpp's Supervisor does that, and asks this).
//
// One agent (`braid launch -n N --min-ranks M`) or one per host (`--nnodes MIN:MAX`, a
// `place.node` >= 0). Every agent names its members ("slot.incarnation" on one host,
// "node.slot.incarnation" over several, so ids stay unique), restarts its own ranks killed
// by a signal up to --max-restarts times (counted per agent, as torchrun counts its
// --max-restarts), and:
//   - the agent hosting the store closes the membership rounds (comm/membership.h), knowing
//     its own members from its process table and the others' from their agents' reports
//     (launch/agent_liveness.h); it orders a remote member left out of a round killed, and
//     counts an agent silent past the rendezvous timeout lost, with all its members;
//   - every other agent reports its members through a heartbeat (launch/agent_heartbeat.h),
//     kills what it is ordered to, and gives up (kills its ranks, fails saying why) when the
//     store stays unreachable past the rendezvous timeout or the coordinator counted it
//     lost.
//
// Not thread-safe: the supervision loop's thread calls it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/membership.h"
#include "comm/store.h"
#include "launch/agent_heartbeat.h"
#include "launch/agent_liveness.h"
#include "launch/launcher.h"

namespace braid::launch {

// Where an agent's ranks stand in the job's first round.
struct AgentPlace {
  int node = -1;                // this agent's node; -1: the one agent of a single-host launch
  int first_rank = 0;           // its first rank in round 1
  int world = 1;                // round 1's ranks over every agent: the launch's size
  int local_ranks = 1;          // its own ranks
  std::vector<int> node_ranks;  // every node's ranks in round 1, by node (multi-host)
  int min_nodes = 0;            // fewer nodes left fail the job (multi-host)
  std::string nodes_flag;       // "--nnodes 2:3", for messages
};

// What the supervision loop must do after a tick.
struct AgentActions {
  std::vector<std::string> kill;   // local members to SIGKILL (left out of a round)
  std::vector<std::string> lines;  // to say on stderr, in order
  std::string fail;  // nonempty: kill every local rank now and fail the agent, saying this
};

// How often an agent reports: 100 ms, or a quarter of a shorter silence limit.
std::chrono::milliseconds heartbeat_period(std::chrono::milliseconds silence_limit);

class ElasticAgent {
 public:
  // `coordinator_store`: the job's store, on the agent that closes the rounds (null on the
  // others). `heartbeat`: on every agent of a multi-host job but the one hosting the store.
  // `store_address`: "host:port", for messages.
  ElasticAgent(const ElasticOptions& options, AgentPlace place,
               std::shared_ptr<comm::Store> coordinator_store,
               std::unique_ptr<AgentHeartbeat> heartbeat, std::string store_address);

  const AgentPlace& place() const { return place_; }
  std::string member_id(int slot, int incarnation) const;

  // A local rank (`name`: "rank 3") died of a signal (`how`: "was killed by signal 9
  // (SIGKILL)"). Whether it is restarted, and the line that says so.
  bool restart_after_kill(const std::string& name, const std::string& how, std::string& line);

  // One look, every few milliseconds of the supervision loop: this agent's members now
  // (`live`, and `gone`: every one that exited, over the job), the process table's word on
  // a member (unknown: not one of this agent's).
  AgentActions tick(const std::vector<std::string>& live, const std::vector<std::string>& gone,
                    const std::function<comm::Liveness(const std::string&)>& local);

  // Whether members of other agents may still run (the agent hosting the store must stay
  // up for them), and whether any other agent finished (its ranks all ended).
  bool others_running() const;
  bool others_finished() const;
  // This agent closes the rounds (it hosts the store).
  bool coordinates() const { return store_ != nullptr; }

  // Said once none of this agent's ranks runs: a last report saying so, so the coordinator
  // counts them gone at once; bounded by a second.
  void finish();

 private:
  AgentActions coordinate(const std::vector<std::string>& live,
                          const std::function<comm::Liveness(const std::string&)>& local);
  AgentActions follow();
  std::string close_line(const comm::ClosedRound& closed) const;

  ElasticOptions options_;
  AgentPlace place_;
  std::string store_address_;
  int restarts_used_ = 0;
  std::shared_ptr<comm::Store> store_;                   // the coordinator's agent only
  std::unique_ptr<comm::RoundCoordinator> coordinator_;  // likewise
  std::optional<AgentLiveness> remote_;                  // likewise, multi-host
  AgentClock::time_point next_read_{};                   // of the remote agents' reports
  std::unique_ptr<AgentHeartbeat> heartbeat_;            // the other agents
};

}  // namespace braid::launch
