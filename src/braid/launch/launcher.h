// `braid launch`: starts N ranks of one job on this machine and supervises them (or, as
// one host's agent of an elastic job over several hosts, this host's ranks: NodesOptions).
//
// The launcher makes a fresh secret and job id (BRAID_JOB_ID, unless the user set one),
// hosts the job's store itself (so the store outlives a failed rank 0), and starts every
// rank with braid's variables (launch/env.h) and torchrun's RANK, WORLD_SIZE, LOCAL_RANK
// and LOCAL_WORLD_SIZE, in its own process group. Rank output reaches the launcher's
// stdout and stderr as whole lines prefixed "[rank i] ". Ranks die with the launcher
// (PR_SET_PDEATHSIG), and whatever a rank leaves running in its process group is killed
// when it exits.
//
// Stopping: the first SIGINT or SIGTERM the launcher gets is forwarded once to every rank
// (their own process groups keep a terminal's Ctrl-C from reaching them directly); an
// echo of it (`timeout` signals the launcher and then its process group) is ignored;
// ranks still running after the grace period get SIGKILL, and so do all at once when a
// signal comes again. When a rank exits non-zero or by a signal, the others get SIGTERM
// and the same grace period. Every SIGTERM or SIGINT sent to a rank is followed by SIGCONT,
// so a stopped rank stops for good rather than at the end of the grace period. The result
// says which ranks stopped by themselves, which were killed and after how long, for a rank
// killed by SIGKILL whether the kernel's OOM killer did it (launch/oom_watch.h), and ends
// with the failure in the ranks' own words: the last line the failed rank wrote to stderr,
// or, when it died of a signal without a word, that of the first rank that failed after it
// (a survivor's "allreduce of gradient bucket 0 failed: ... rank 1 (process N) died").
//
// Parameter-server jobs (LaunchOptions::servers) differ in one way: a worker's failure is
// reported on the launcher's stderr but stops nothing (with ps_max_restarts, a worker or
// server killed by a signal is restarted instead), since whether the job can go on
// without it is the servers' call (they know the consistency mode). Once every server has
// exited, a worker still running cannot progress: a stopped one is stopped for good at once,
// any other after a 30 s grace, each named. Such a job failed when its chief (worker 0) or
// every worker failed.
//
// Not thread-safe: one launch() per process at a time (it installs signal handlers for
// SIGINT, SIGTERM, SIGCHLD and ignores SIGPIPE while it runs, then restores them).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/transport_factory.h"

namespace braid::launch {

// Elastic jobs (`braid launch --min-ranks M --max-restarts K`): a rank killed by a signal
// does not stop the job. The launcher restarts it (a new process, up to max_restarts times
// over the job, or per host with NodesOptions) and the survivors go on without it meanwhile: they
// meet in a new membership round (comm/membership.h), which the launcher's coordinator closes
// beside the store it hosts, so any rank, rank 0 included, may die. A rank that exits with an error
// code still fails the job: that is a bug or bad input, which a restart would repeat.
struct ElasticOptions {
  int min_ranks = 1;     // fewer members left than this: the job fails
  int max_ranks = 0;     // 0: the launch's rank count; newcomers past it wait for a place
  int max_restarts = 0;  // restarts of failed ranks, over the whole job (per agent: nodes)
  // How long a round waits for a member that is alive but silent (stopped, hung) before it
  // closes without it; the launcher then kills that member (and restarts it if it may).
  // Over several hosts also how long an agent may be silent before it is lost, and how long
  // an agent tries to reach the store before it gives up.
  std::chrono::milliseconds rendezvous_timeout{10000};
  // Nonempty: the variables a process started by hand needs to join the job (the store's
  // address, the secret, the job id, its elastic mode and launch size), written here as
  // NAME=value lines readable by the user alone: `env $(cat FILE) braid train ...`.
  std::string join_file;
};

// An elastic job over several hosts (`braid launch --nnodes MIN:MAX --rdzv-endpoint
// HOST:PORT`): this launcher is one host's agent, running LaunchOptions::ranks ranks there.
// The agent that can bind HOST:PORT (on the host HOST names, the first to try) hosts the
// job's store and its round coordinator; every agent finds the others there, and the job
// starts once MIN agents came (at once with MAX; else after a last call of the rendezvous
// timeout). Agents share BRAID_SECRET (required) and the job id. Each restarts its own
// ranks (ElasticOptions::max_restarts counts per agent) and reports them to the coordinator
// every 100 ms; an agent silent past the rendezvous timeout is lost with its ranks, and one
// that cannot reach the store as long kills its ranks and fails, saying so. Fewer than MIN
// hosts with members fail the job. The agent hosting the store must live for the job: it
// waits for the other agents to finish before it exits.
struct NodesOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  std::string endpoint_host;  // the store's address, as every host reaches it
  uint16_t endpoint_port = 0;
  std::string job_id;  // empty: BRAID_JOB_ID, else "nodes"
  // How long an agent waits at start for the store and for MIN agents.
  std::chrono::milliseconds join_timeout{600000};
};

struct LaunchOptions {
  int ranks = 1;  // with `nodes`: this host's
  std::optional<ElasticOptions> elastic;
  std::optional<NodesOptions> nodes;  // requires `elastic`
  // > 0: a parameter-server job of `ranks` - `servers` workers (ranks 0..W-1) and `servers`
  // servers (the last ranks), each started with BRAID_ROLE, BRAID_ROLE_INDEX,
  // BRAID_NUM_WORKERS and BRAID_NUM_SERVERS (launch/cluster_spec.h) and its output prefixed
  // "[worker i] " or "[ps j] ". A worker that fails does not stop the job: the servers
  // decide (async and ssp go on without it; sync fails with an error naming it). A server
  // that fails stops the job as any rank does.
  int servers = 0;
  // With servers: the last rank is the job's evaluator (BRAID_ROLE=evaluator,
  // BRAID_NUM_EVALUATORS=1, output "[evaluator] "); its failure stops the job.
  bool evaluator = false;
  // With servers, > 0: a worker or server killed by a signal is restarted in its slot as a
  // new process (BRAID_RESTART_COUNT, its incarnation), this many times over the job
  // (launch/ps_restart_policy.h); every rank gets BRAID_PS_RESTARTS. The survivors
  // reconnect to it (parallel/ps_restarts.h). A restarted server does not stop the job.
  int ps_max_restarts = 0;
  std::vector<std::string> command;                  // program and arguments, run through PATH
  std::optional<std::chrono::milliseconds> timeout;  // BRAID_TIMEOUT_S for the ranks
  std::optional<comm::TransportKind> transport;      // BRAID_TRANSPORT for the ranks
  // SIGTERM -> SIGKILL. Ranks of `braid train` save a checkpoint on SIGTERM, which must
  // fit. 25 s: the launcher is itself under a grace period when a scheduler preempts it
  // (Kubernetes' terminationGracePeriodSeconds and Slurm's KillWait are 30 s by default),
  // and stopping a few seconds sooner leaves it the time to report before its own SIGKILL.
  std::chrono::milliseconds grace{25000};
  int out_fd = 1;  // where the ranks' stdout lines go
  int err_fd = 2;  // where their stderr lines go
};

struct LaunchResult {
  // 0 when every rank exited 0; else the failing rank's exit code, or 128 + the signal
  // that killed it (or that interrupted the launcher).
  int exit_code = 0;
  std::string message;  // one line for the user when exit_code != 0
  // Parameter-server jobs: the workers that failed while the job went on without them
  // ("worker 1 was killed by signal 9 (SIGKILL)"), also reported as they happen.
  std::vector<std::string> lost_workers;
};

// Errors before any rank runs (a command that cannot be executed, no store) are
// braid::Error / IoError naming the problem.
LaunchResult launch(const LaunchOptions& options);

// "SIGKILL" for 9; "signal 64" when it has no name.
std::string signal_name(int signo);

}  // namespace braid::launch
