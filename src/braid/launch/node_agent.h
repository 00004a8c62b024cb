// Starting one host's agent of a multi-host elastic job (LaunchOptions::nodes): host the
// store or find it (launch/store_endpoint.h), meet the other agents (launch/
// node_rendezvous.h), and build the agent's elastic side (launch/elastic_agent.h): the round
// coordinator where the store is, a heartbeat everywhere else. What it returns must outlive
// the supervision of the agent's ranks.
#pragma once

#include <memory>
#include <string>

#include "comm/secret.h"
#include "comm/store_server.h"
#include "launch/elastic_agent.h"
#include "launch/launcher.h"

namespace braid::launch {

struct NodeAgent {
  std::unique_ptr<comm::StoreServer> hosted_store;  // this agent hosts the job's store
  comm::Secret secret;
  std::string job_id;         // as the ranks' store keys spell it
  std::string store_address;  // HOST:PORT, as every host reaches it
  std::unique_ptr<ElasticAgent> elastic;
};

// Error / IoError / TimeoutError naming what failed and what to do (no secret, the store
// unreachable within the join timeout, too few agents, no place left).
NodeAgent start_node_agent(const LaunchOptions& options);

}  // namespace braid::launch
