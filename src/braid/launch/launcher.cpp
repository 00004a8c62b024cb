// launch(): what a launch sets up before its ranks start, the store and an elastic job's
// side (on one host, or an agent's of a job over several: launch/node_agent.h), then the
// supervision (launch/supervisor.h).
#include "launch/launcher.h"

#include <sys/prctl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "comm/secret.h"
#include "comm/store_server.h"
#include "comm/tcp_store.h"
#include "core/error.h"
#include "launch/child_process.h"
#include "launch/elastic_agent.h"
#include "launch/node_agent.h"
#include "launch/oom_watch.h"
#include "launch/signal_relay.h"
#include "launch/supervisor.h"

namespace braid::launch {

std::string signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

LaunchResult launch(const LaunchOptions& options) {
  BRAID_CHECK(options.ranks >= 1, "launch: -n must be at least 1, got ", options.ranks);
  BRAID_CHECK(options.servers >= 0 && options.servers + (options.evaluator ? 1 : 0) < options.ranks,
              "launch: ", options.servers, " servers in a job of ", options.ranks,
              " ranks leaves no worker; pass --workers W >= 1 beside --servers S");
  BRAID_CHECK(!options.evaluator || options.servers > 0,
              "launch: an evaluator belongs to a parameter-server job (--servers S --workers W)");
  if (options.command.empty())
    BRAID_THROW(Error, "braid launch: no command to run; usage: braid launch -n N -- CMD ARGS...");
  const char* path_env = ::getenv("PATH");
  const std::string path = resolve_command(
      options.command[0], path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin");

  // An agent of a job over several hosts meets the others first: until then there is no
  // rank to supervise, and a signal ends it as it would any program.
  std::optional<NodeAgent> node;
  if (options.nodes) {
    BRAID_CHECK(options.elastic && options.servers == 0,
                "launch: a job over several hosts (--nnodes) is an elastic DDP job");
    node.emplace(start_node_agent(options));
  }

  SignalRelay signals;
  // Orphans of the ranks become the launcher's children, to be reaped rather than left
  // as zombies under an init that may not reap.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct SubreaperOff {
    ~SubreaperOff() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } subreaper_off;
  OomWatch oom;
  if (node) {
    return supervise_ranks(
        options, {path, node->store_address, node->secret, node->job_id, node->elastic.get()},
        signals.read_fd(), oom);
  }

  const comm::Secret secret = comm::Secret::generate();
  comm::StoreServerOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = 0;
  store_options.secret = secret;
  comm::StoreServer store(std::move(store_options));

  // A user's BRAID_JOB_ID names the job; else a fresh one, so that even ranks pointed at
  // a shared store elsewhere keep their keys apart from other jobs'.
  const char* given_id = ::getenv("BRAID_JOB_ID");
  const std::string job_id = given_id != nullptr && *given_id != '\0'
                                 ? std::string(given_id)
                                 : "launch-" + comm::Secret::generate().hex().substr(0, 16);
  // An elastic job's one agent: it closes the rounds beside the store it hosts.
  std::unique_ptr<ElasticAgent> elastic;
  if (options.elastic) {
    AgentPlace place;
    place.world = options.ranks;
    place.local_ranks = options.ranks;
    auto client = comm::connect_store("127.0.0.1", store.port(), secret,
                                      comm::Deadline::after(std::chrono::seconds(10)));
    elastic = std::make_unique<ElasticAgent>(*options.elastic, std::move(place),
                                             comm::prefixed(std::move(client), "job/" + job_id),
                                             nullptr, store.address());
  }
  return supervise_ranks(
      options, {path, "127.0.0.1:" + std::to_string(store.port()), secret, job_id, elastic.get()},
      signals.read_fd(), oom);
}

}  // namespace braid::launch
