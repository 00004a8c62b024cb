// How the agents of a multi-host elastic job (`braid launch --nnodes MIN:MAX`) meet before
// any rank starts, so that every agent knows the first round's size and its own ranks in it
// (as torchrun's agents do). Each agent appends "agent:P" (its id, its ranks) to the store
// key nodes/asks. The agent hosting the store closes the list: at once when MAX agents
// asked; once MIN asked and `last_call` passed with no more; never with fewer than MIN, whom
// it waits for up to `join_timeout`. It writes nodes/list, itself first, then the others in
// the order they asked; an agent's index in it is its node, and the ranks of round 1 are the
// nodes' ranks in that order. An agent that asked after the list closed is not in it and
// fails, saying so: the nodes of a job are settled at its start.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "comm/store.h"

namespace braid::launch {

struct NodeRendezvousOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  int local_ranks = 1;  // this agent's ranks (--nproc-per-node)
  std::string agent;    // unique among the agents: host name, pid and a random tag
  std::chrono::milliseconds last_call{10000};
  std::chrono::milliseconds join_timeout{600000};
  std::string nodes_flag = "--nnodes";  // the setting, for messages ("--nnodes 2:4")
};

struct NodePlace {
  int node = 0;                  // this agent's index in the list
  std::vector<int> local_ranks;  // every node's ranks, by node
  int first_rank() const;        // this node's first rank in round 1
  int world() const;             // round 1's ranks over every node
  int nodes() const { return static_cast<int>(local_ranks.size()); }
};

// The agent hosting the store. Error when fewer than MIN agents came within join_timeout,
// naming how many did and what to do.
NodePlace close_node_round(comm::Store& store, const NodeRendezvousOptions& options);

// Any other agent. TimeoutError when no list came within join_timeout; Error when the list
// closed without this agent.
NodePlace join_node_round(comm::Store& store, const NodeRendezvousOptions& options);

}  // namespace braid::launch
