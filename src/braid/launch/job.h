// Joining a job: what every rank does first. Reads its place in the job (launch/env.h),
// the job's secret (launch/secret_env.h) and the comm settings (launch/comm_env.h), meets the other
// ranks at the store (rank 0 hosts it unless the launcher does), connects the transport and returns
// the world group. Every key the job writes lives under "job/<id>/" of the store (launch/job_id.h),
// so one long-lived store serves any number of jobs, one after another or at once.
//
// Lifetime: a Job owns everything it made; destroying it closes the group, the transport,
// the store connection and (on rank 0) the hosted store, in that order. Rank 0 should
// therefore outlive the others' use of the store: every rank's store use ends inside
// join_job, so a barrier before exit is enough.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "comm/algorithm.h"
#include "comm/group.h"
#include "comm/membership.h"
#include "comm/secret.h"
#include "comm/store.h"
#include "comm/store_server.h"
#include "comm/transport_factory.h"
#include "launch/env.h"

namespace braid::launch {

struct JoinOptions {
  // Unset: BRAID_TRANSPORT (auto, shm, tcp), else automatic.
  std::optional<comm::TransportKind> transport;
  // Deadline of joining and the world group's timeout. Unset: BRAID_TIMEOUT_S, else
  // comm::kDefaultTimeout.
  std::optional<std::chrono::milliseconds> timeout;
  // Fields left unset are filled from the environment (launch/comm_env.h); an empty
  // route_probe_host becomes the store's host.
  comm::TransportOptions transport_options;
  // The world group's selection table (inherited by groups split from it). Null:
  // BRAID_ALGORITHM_TABLE's file, else the built-in table.
  std::shared_ptr<const comm::SelectionTable> algorithm_table;
  // Every variable join_job reads, it reads through this: the rank's place, the secret,
  // the timeout, the transport and the comm settings.
  GetEnv getenv = ::getenv;
};

// Members are declared in the order they are built, so they are destroyed in reverse.
struct Job {
  RankEnv env;
  comm::Secret secret;
  std::unique_ptr<comm::StoreServer> hosted_store;  // rank 0's, unless the launcher hosts it
  std::shared_ptr<comm::Store> store;               // a view under this job's key prefix
  std::shared_ptr<comm::Group> world;
  comm::TransportKind transport_kind = comm::TransportKind::automatic;  // as requested
  comm::TransportOptions transport_options;  // as passed to the transport
};

// BRAID_BACKEND: "braid" (default: nullopt), "mpi" (MPI's collectives) or "mpi-p2p"
// (braid's algorithms over MPI point-to-point). Throws braid::Error for anything else.
std::optional<std::string> mpi_backend(const GetEnv& getenv = ::getenv);

// Throws braid::Error for a bad environment, a multi-rank job without a secret, or one on
// a shared store (BRAID_STORE_HOSTED=1) without a job id or with an id used before there,
// IoError when the store or a peer cannot be reached, TimeoutError naming what was awaited
// when the deadline passes.
Job join_job(const JoinOptions& options = {});

// An elastic job's rank (BRAID_ELASTIC=1: `braid launch --min-ranks ...`): it reaches the
// store but has no fixed world; every membership round (comm/membership.h) gets a world of
// its own from connect_round.
struct ElasticJob {
  Job job;  // its world stays null
  comm::GroupOptions group_options;
  std::string member;     // BRAID_ELASTIC_MEMBER, or a guest's own id
  int restart_count = 0;  // BRAID_RESTART_COUNT: restarts of this rank before this process
};
bool elastic_requested(const GetEnv& getenv = ::getenv);

// A parameter-server job whose launcher restarts its dead processes (`braid launch
// --servers S --workers W --max-restarts K`): BRAID_PS_RESTARTS (K) and this process's
// incarnation, BRAID_RESTART_COUNT (restarts of its slot before it). braid::Error for a
// malformed value.
struct PsRestartEnv {
  int max_restarts = 0;
  int incarnation = 0;
  bool enabled() const { return max_restarts > 0; }
};
PsRestartEnv read_ps_restart_env(const GetEnv& getenv = ::getenv);
// A restarted process of such a job (incarnation > 0): reaches the store like join_job, then
// publishes a transport of its own (comm::connect_rejoining_transport) that its peers
// connect to as they learn of the restart; it joins no collective.
Job rejoin_ps_job(const JoinOptions& options, int incarnation);
// The store of the job's world transport (where restarted processes publish theirs).
std::shared_ptr<comm::Store> transport_store(const Job& job);
ElasticJob join_elastic_job(const JoinOptions& options = {});
std::shared_ptr<comm::Group> connect_round(ElasticJob& job, const comm::Round& round,
                                           comm::Deadline deadline);

}  // namespace braid::launch
