// `braid store`: a standalone rendezvous store server for jobs whose ranks are started by
// something else (mpirun, srun, a Kubernetes operator). Serves until SIGINT or SIGTERM, any
// number of jobs one after another or at once: each job keeps its keys under its own id
// (BRAID_JOB_ID or the scheduler's, launch/job_id.h), and its ranks set
// BRAID_STORE_HOSTED=1 so rank 0 does not host a store of its own.

#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "cli/stop_signal_wait.h"
#include "comm/secret.h"
#include "comm/store_server.h"
#include "core/error.h"
#include "launch/secret_env.h"

namespace braid::cli {
namespace {

struct StoreFlags {
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string secret_file;
};

void run_store(const StoreFlags& f) {
  const comm::Secret secret =
      f.secret_file.empty() ? launch::read_secret() : comm::Secret::from_file(f.secret_file);
  if (secret.empty())
    BRAID_THROW(Error,
                "braid store: no secret; pass --secret-file FILE or set BRAID_SECRET / "
                "BRAID_SECRET_FILE (e.g. `openssl rand -hex 32 > secret`), and give the same "
                "secret to every rank");
  catch_stop_signals("braid store");

  comm::StoreServerOptions options;
  options.host = f.host;
  options.port = static_cast<uint16_t>(f.port);
  options.secret = secret;
  comm::StoreServer server(std::move(options));
  std::printf("braid store listening on %s\n", server.address().c_str());
  std::fflush(stdout);

  const int signal = wait_for_stop_signal();
  std::fprintf(stderr, "braid store: %s received, stopping\n", strsignal(signal));
  server.stop();
}

}  // namespace

void add_store_command(CLI::App& app) {
  auto flags = std::make_shared<StoreFlags>();
  CLI::App* cmd = app.add_subcommand(
      "store", "Run a rendezvous store server for ranks started by mpirun, srun or others");
  cmd->add_option("--host", flags->host,
                  "interface address to listen on (0.0.0.0: every interface)")
      ->capture_default_str();
  cmd->add_option("--port", flags->port, "TCP port (0: pick a free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--secret-file", flags->secret_file,
                  "file holding the job's secret in hex (default: BRAID_SECRET or "
                  "BRAID_SECRET_FILE)");
  cmd->callback([flags] { run_store(*flags); });
}

}  // namespace braid::cli
