// `braid launch -n N [--timeout S] [--transport auto|shm|tcp] [--grace S] -- CMD ARGS...`:
// runs N ranks of a job on this machine (launch/launcher.h) and exits with the job's status.
// `braid launch --servers S --workers W [--max-restarts K] -- CMD ARGS...` runs a
// parameter-server job of W workers and S servers (W + S ranks, each told its role); with
// K, a worker or server killed by a signal is restarted and rejoins the job.
// `braid launch -n N --min-ranks M [--max-ranks X] [--max-restarts K] -- CMD ARGS...` runs an
// elastic job: a rank killed by a signal is restarted (K times over the job) while the others
// go on without it, and the job fails only when fewer than M ranks are left.
// `braid launch --nnodes MIN:MAX --nproc-per-node P --rdzv-endpoint HOST:PORT -- CMD ARGS...`
// is one host's agent of an elastic job over several hosts (launch/launcher.h, NodesOptions).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "launch/env.h"
#include "launch/launcher.h"

namespace braid::cli {
namespace {

struct LaunchFlags {
  int ranks = 0;
  int servers = 0;
  int workers = 0;
  bool evaluator = false;
  double timeout_s = 0;
  double grace_s = 0;
  std::string transport;
  int min_ranks = 0;
  int max_ranks = 0;
  int max_restarts = 0;
  double rendezvous_timeout_s = 10;
  std::string join_file;
  std::string nnodes;  // "MIN:MAX" or "N"
  int nproc_per_node = 0;
  std::string rdzv_endpoint;
  std::string rdzv_id;
  double join_timeout_s = 600;
  std::vector<std::string> command;
};

// "2:4" -> {2, 4}; "3" -> {3, 3}.
std::pair<int, int> parse_nnodes(const std::string& text) {
  const size_t colon = text.find(':');
  int lo = 0, hi = 0;
  try {
    size_t used = 0;
    lo = std::stoi(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon)) throw std::invalid_argument("");
    hi = lo;
    if (colon != std::string::npos) {
      hi = std::stoi(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1) throw std::invalid_argument("");
    }
  } catch (const std::exception&) {
    throw CLI::ValidationError("--nnodes", "'" + text + "' is not MIN:MAX (e.g. 2:4) or N");
  }
  if (lo < 1 || hi < lo || hi > 4096)
    throw CLI::ValidationError("--nnodes", "'" + text + "' needs 1 <= MIN <= MAX <= 4096");
  return {lo, hi};
}

// The multi-host flags: --nnodes with --nproc-per-node and --rdzv-endpoint, never -n.
void read_nodes_flags(const CLI::App& cmd, const LaunchFlags& f, launch::LaunchOptions& options) {
  if (cmd.count("--nproc") > 0)
    throw CLI::ValidationError("-n", "with --nnodes, give each host's ranks as --nproc-per-node");
  if (cmd.count("--nproc-per-node") == 0 || cmd.count("--rdzv-endpoint") == 0)
    throw CLI::RequiredError("--nproc-per-node P and --rdzv-endpoint HOST:PORT (with --nnodes)");
  launch::NodesOptions n;
  std::tie(n.min_nodes, n.max_nodes) = parse_nnodes(f.nnodes);
  try {
    launch::parse_store_address("--rdzv-endpoint", f.rdzv_endpoint, n.endpoint_host,
                                n.endpoint_port);
  } catch (const Error& e) {
    throw CLI::ValidationError("--rdzv-endpoint", e.what());
  }
  n.job_id = f.rdzv_id;
  n.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.join_timeout_s * 1000 + 0.5));
  options.ranks = f.nproc_per_node;
  options.nodes = n;
}

void run_launch(const CLI::App& cmd, const LaunchFlags& f) {
  launch::LaunchOptions options;
  const bool ps = cmd.count("--servers") > 0 || cmd.count("--workers") > 0;
  if (ps) {
    if (cmd.count("--servers") == 0 || cmd.count("--workers") == 0)
      throw CLI::ValidationError("--servers/--workers",
                                 "a parameter-server job needs both --servers S and --workers W");
    const int ranks = f.servers + f.workers + (f.evaluator ? 1 : 0);
    if (cmd.count("--nproc") > 0 && f.ranks != ranks)
      throw CLI::ValidationError(
          "-n", "-n " + std::to_string(f.ranks) + " disagrees with --servers " +
                    std::to_string(f.servers) + " --workers " + std::to_string(f.workers) +
                    (f.evaluator ? " --evaluator" : "") + " (" + std::to_string(ranks) +
                    " ranks); drop -n");
    options.ranks = ranks;
    options.servers = f.servers;
    options.evaluator = f.evaluator;
    if (cmd.count("--min-ranks") + cmd.count("--max-ranks") + cmd.count("--join-file") > 0)
      throw CLI::ValidationError("--min-ranks/--max-ranks/--join-file",
                                 "a parameter-server job's membership is its workers and servers; "
                                 "of the elastic flags it takes --max-restarts K only");
    options.ps_max_restarts = f.max_restarts;
  } else {
    if (f.evaluator)
      throw CLI::ValidationError("--evaluator",
                                 "an evaluator belongs to a parameter-server job: add --servers S "
                                 "--workers W");
    const bool nodes = cmd.count("--nnodes") > 0;
    if (nodes) {
      read_nodes_flags(cmd, f, options);
    } else {
      if (cmd.count("--nproc") == 0)
        throw CLI::RequiredError("-n (or --servers S --workers W for a parameter-server job)");
      options.ranks = f.ranks;
    }
    if (nodes || cmd.count("--min-ranks") + cmd.count("--max-ranks") + cmd.count("--max-restarts") +
                         cmd.count("--join-file") >
                     0) {
      launch::ElasticOptions e;
      e.min_ranks = cmd.count("--min-ranks") > 0 ? f.min_ranks : 1;
      e.max_ranks = f.max_ranks;
      e.max_restarts = f.max_restarts;
      e.rendezvous_timeout =
          std::chrono::milliseconds(static_cast<int64_t>(f.rendezvous_timeout_s * 1000 + 0.5));
      e.join_file = f.join_file;
      // Over several hosts the job's size is known once the agents met (node_agent.h checks).
      if (!nodes && e.min_ranks > f.ranks)
        throw CLI::ValidationError("--min-ranks", "--min-ranks " + std::to_string(e.min_ranks) +
                                                      " is more than -n " +
                                                      std::to_string(f.ranks));
      if (!nodes && e.max_ranks > 0 && e.max_ranks < f.ranks)
        throw CLI::ValidationError("--max-ranks", "--max-ranks " + std::to_string(e.max_ranks) +
                                                      " is less than -n " +
                                                      std::to_string(f.ranks));
      options.elastic = e;
    }
  }
  options.command = f.command;
  if (cmd.count("--timeout") > 0)
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000 + 0.5));
  if (cmd.count("--transport") > 0) options.transport = comm::parse_transport_kind(f.transport);
  if (cmd.count("--grace") > 0)
    options.grace = std::chrono::milliseconds(static_cast<int64_t>(f.grace_s * 1000 + 0.5));
  const launch::LaunchResult result = launch::launch(options);
  if (result.exit_code == 0 && !result.lost_workers.empty())
    std::fprintf(stderr, "braid launch: the job finished; %zu worker%s lost on the way\n",
                 result.lost_workers.size(), result.lost_workers.size() == 1 ? " was" : "s were");
  if (result.exit_code != 0) {
    // The job's status is the launcher's: a script sees the failing rank's exit code.
    std::fprintf(stderr, "%s\n", result.message.c_str());
    std::fflush(nullptr);
    std::exit(result.exit_code);
  }
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Run N ranks of a job on this machine: braid launch -n N -- CMD ARGS... (a "
      "parameter-server job: braid launch --servers S --workers W -- CMD ARGS...; one host's "
      "agent of an elastic job over several: braid launch --nnodes MIN:MAX --nproc-per-node P "
      "--rdzv-endpoint HOST:PORT -- CMD ARGS...)");
  cmd->add_option("-n,--nproc", flags->ranks, "Number of ranks")->check(CLI::Range(1, 4096));
  cmd->add_option("--servers", flags->servers,
                  "A parameter-server job: this many servers (the last ranks), with --workers")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--workers", flags->workers,
                  "A parameter-server job: this many workers (ranks 0..W-1), with --servers")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--evaluator", flags->evaluator,
                "A parameter-server job: one more rank that evaluates the servers' model and "
                "makes the stop decisions");
  cmd->add_option("--timeout", flags->timeout_s,
                  "Seconds any communication wait of a rank may take (sets BRAID_TIMEOUT_S)")
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--transport", flags->transport, "auto, shm or tcp (sets BRAID_TRANSPORT)")
      ->check(CLI::IsMember({"auto", "shm", "tcp"}));
  cmd->add_option("--grace", flags->grace_s,
                  "Seconds ranks get to stop after SIGTERM (e.g. to save a checkpoint) before "
                  "SIGKILL (default 25)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--min-ranks", flags->min_ranks,
                  "An elastic job: go on while at least this many ranks are left (a rank killed "
                  "by a signal no longer stops the job)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-ranks", flags->max_ranks,
                  "An elastic job: the most ranks at once, newcomers included (default -n)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-restarts", flags->max_restarts,
                  "An elastic job: restart failed ranks this many times over the job, or per host "
                  "with --nnodes (each restart joins the running job and takes its state from a "
                  "live rank). A parameter-server job: restart a worker or server killed by a "
                  "signal this many times (a worker rejoins at the servers' step; a server "
                  "reloads its range from the run's last checkpoint)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--rendezvous-timeout", flags->rendezvous_timeout_s,
                  "An elastic job: seconds a new round waits for a silent member (stopped, hung) "
                  "before it goes on without it and the launcher kills it (default 10); with "
                  "--nnodes also how long a host's agent may go unheard (its link cut, its host "
                  "dead) before its ranks are counted gone, and how long an agent that cannot "
                  "reach the store waits before it kills its ranks and fails")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--join-file", flags->join_file,
                  "An elastic job: write the variables a process started by hand needs to join "
                  "it into this file (readable by you alone): env $(cat FILE) braid train ...");
  cmd->add_option("--nnodes", flags->nnodes,
                  "An elastic job over several hosts: MIN:MAX hosts (or N), one `braid launch` "
                  "agent on each, with --nproc-per-node and --rdzv-endpoint (BRAID_SECRET set, "
                  "the same everywhere). The agent that can bind the endpoint hosts the job's "
                  "store; fewer than MIN hosts left fail the job");
  cmd->add_option("--nproc-per-node", flags->nproc_per_node, "With --nnodes: this host's ranks")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--rdzv-endpoint", flags->rdzv_endpoint,
                  "With --nnodes: HOST:PORT of the job's store, the same on every host; the agent "
                  "on the host whose address HOST is hosts it");
  cmd->add_option("--rdzv-id", flags->rdzv_id,
                  "With --nnodes: the job's id, the same on every host (default BRAID_JOB_ID, "
                  "else 'nodes')");
  cmd->add_option("--join-timeout", flags->join_timeout_s,
                  "With --nnodes: seconds an agent waits at start for the store and for MIN "
                  "hosts (default 600)")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("command", flags->command,
                  "The program every rank runs and its arguments, after --")
      ->required();
  cmd->callback([cmd, flags] { run_launch(*cmd, *flags); });
}

}  // namespace braid::cli
