// The supervision of one launch's ranks on this host (`braid launch`, launch/launcher.h
// says what the user sees): start them, relay their output, reap them, stop them on a
// failure or a signal, restart an elastic job's lost ranks (launch/elastic_agent.h), and
// say how the launch ended.
#pragma once

#include <string>

#include "comm/secret.h"
#include "launch/elastic_agent.h"
#include "launch/launcher.h"
#include "launch/oom_watch.h"

namespace braid::launch {

// What every rank is started with, beyond LaunchOptions.
struct RankStart {
  std::string path;           // the command, resolved (child_process.h)
  std::string store_address;  // BRAID_STORE_ADDR: the job's store, hosted by a launcher
  comm::Secret secret;
  std::string job_id;
  ElasticAgent* elastic = nullptr;  // an elastic job's side; must outlive the call
};

// Starts options.ranks ranks and supervises them until they are gone. `signal_fd`: the read
// end of launch/signal_relay.h's pipe. Errors before any rank runs are braid::Error.
LaunchResult supervise_ranks(const LaunchOptions& options, const RankStart& start, int signal_fd,
                             OomWatch& oom);

}  // namespace braid::launch
