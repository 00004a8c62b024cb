#include "launch/node_agent.h"

#include <unistd.h>

#include "comm/tcp_store.h"
#include "core/error.h"
#include "launch/agent_heartbeat.h"
#include "launch/job_id.h"
#include "launch/node_rendezvous.h"
#include "launch/secret_env.h"
#include "launch/store_endpoint.h"

namespace braid::launch {
namespace {

std::string endpoint_text(const NodesOptions& n) {
  const bool v6 = n.endpoint_host.find(':') != std::string::npos;
  return (v6 ? "[" + n.endpoint_host + "]" : n.endpoint_host) + ":" +
         std::to_string(n.endpoint_port);
}

std::string nodes_flag(const NodesOptions& n) {
  return "--nnodes " + std::to_string(n.min_nodes) + ":" + std::to_string(n.max_nodes);
}

// Unique among the agents of a job: two agents may share a host name (containers) or a pid
// (namespaces), not both and a random tag.
std::string agent_id() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string id = std::string(host) + "-" + std::to_string(::getpid()) + "-" +
                   comm::Secret::generate().hex().substr(0, 8);
  for (char& c : id)
    if (c == ' ' || c == ':' || c == '\n') c = '_';
  return id;
}

void say(int fd, const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());
}

}  // namespace

NodeAgent start_node_agent(const LaunchOptions& options) {
  BRAID_CHECK(options.nodes && options.elastic, "start_node_agent: not a multi-host job");
  const NodesOptions& n = *options.nodes;
  const ElasticOptions& e = *options.elastic;
  NodeAgent agent;
  agent.secret = read_secret();
  if (agent.secret.empty())
    BRAID_THROW(Error, "braid launch ", nodes_flag(n),
                ": the agents on every host need one secret for the job's connections: set "
                "BRAID_SECRET (e.g. BRAID_SECRET=$(openssl rand -hex 32), the same on every "
                "host) or BRAID_SECRET_FILE");
  const char* env_id = ::getenv("BRAID_JOB_ID");
  agent.job_id = escape_job_id(!n.job_id.empty()                      ? n.job_id
                               : env_id != nullptr && *env_id != '\0' ? std::string(env_id)
                                                                      : "nodes");
  agent.store_address = endpoint_text(n);
  agent.hosted_store = host_store_if_mine(n.endpoint_host, n.endpoint_port, agent.secret);
  const std::string prefix = "job/" + agent.job_id;
  std::shared_ptr<comm::Store> store;
  const std::string where = "braid launch: cannot reach the job's store at " + agent.store_address +
                            " (--rdzv-endpoint: the agent on the host whose address that is "
                            "hosts it; every agent needs the same BRAID_SECRET): ";
  try {
    store = comm::prefixed(comm::connect_store(n.endpoint_host, n.endpoint_port, agent.secret,
                                               comm::Deadline::after(n.join_timeout)),
                           prefix);
  } catch (const TimeoutError& e) {
    BRAID_THROW(TimeoutError, where, e.what());
  } catch (const IoError& e) {
    BRAID_THROW(IoError, where, e.what());
  } catch (const Error& e) {
    BRAID_THROW(Error, where, e.what());
  }

  NodeRendezvousOptions r;
  r.min_nodes = n.min_nodes;
  r.max_nodes = n.max_nodes;
  r.local_ranks = options.ranks;
  r.agent = agent_id();
  r.last_call = e.rendezvous_timeout;
  r.join_timeout = n.join_timeout;
  r.nodes_flag = nodes_flag(n);
  const NodePlace node =
      agent.hosted_store ? close_node_round(*store, r) : join_node_round(*store, r);

  AgentPlace place;
  place.node = node.node;
  place.first_rank = node.first_rank();
  place.world = node.world();
  place.local_ranks = options.ranks;
  place.node_ranks = node.local_ranks;
  place.min_nodes = n.min_nodes;
  place.nodes_flag = r.nodes_flag;
  BRAID_CHECK(e.max_ranks == 0 || e.max_ranks >= place.world, "braid launch: --max-ranks ",
              e.max_ranks, " is less than the ", place.world, " ranks the ", node.nodes(),
              " agents brought (", r.nodes_flag, ")");
  BRAID_CHECK(e.min_ranks <= place.world, "braid launch: --min-ranks ", e.min_ranks,
              " is more than the ", place.world, " ranks the ", node.nodes(), " agents brought (",
              r.nodes_flag, ")");
  say(options.err_fd,
      "braid launch: this host is node " + std::to_string(node.node) + " of " +
          std::to_string(node.nodes()) + " (ranks " + std::to_string(place.first_rank) + ".." +
          std::to_string(place.first_rank + options.ranks - 1) + " of " +
          std::to_string(place.world) + "); the job's store at " + agent.store_address +
          (agent.hosted_store ? " is hosted here" : " is another agent's"));

  std::unique_ptr<AgentHeartbeat> heartbeat;
  if (!agent.hosted_store) {
    // Every call bounded well inside the silence limit, so a cut link is seen in time.
    const std::chrono::milliseconds call_timeout = std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(50), e.rendezvous_timeout / 4);
    const std::string host = n.endpoint_host;
    const uint16_t port = n.endpoint_port;
    const comm::Secret secret = agent.secret;
    heartbeat = std::make_unique<AgentHeartbeat>(
        [=] {
          return comm::prefixed(
              comm::connect_store(host, port, secret, comm::Deadline::after(call_timeout),
                                  comm::StoreClientOptions{call_timeout}),
              prefix);
        },
        node.node, heartbeat_period(e.rendezvous_timeout));
    store.reset();
  }
  agent.elastic = std::make_unique<ElasticAgent>(e, std::move(place), std::move(store),
                                                 std::move(heartbeat), agent.store_address);
  return agent;
}

}  // namespace braid::launch
