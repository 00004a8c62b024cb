// `braid launch -n N [--timeout S] [--transport auto|shm|tcp] [--grace S] -- CMD ARGS...`:
// runs N ranks of a job on this machine (launch/launcher.h) and exits with the job's status.
// `braid launch --servers S --workers W -- CMD ARGS...` runs a parameter-server job of W
// workers and S servers (W + S ranks, each told its role).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
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
  std::vector<std::string> command;
};

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
  } else {
    if (f.evaluator)
      throw CLI::ValidationError("--evaluator",
                                 "an evaluator belongs to a parameter-server job: add --servers S "
                                 "--workers W");
    if (cmd.count("--nproc") == 0)
      throw CLI::RequiredError("-n (or --servers S --workers W for a parameter-server job)");
    options.ranks = f.ranks;
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
      "parameter-server job: braid launch --servers S --workers W -- CMD ARGS...)");
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
  cmd->add_option("command", flags->command,
                  "The program every rank runs and its arguments, after --")
      ->required();
  cmd->callback([cmd, flags] { run_launch(*cmd, *flags); });
}

}  // namespace braid::cli
