// `braid serve`: the job server (serve/api_server.h) over its database in --data-dir, until
// SIGINT or SIGTERM. Its first start makes the admin user and writes the admin's token to
// DATA_DIR/admin-token (readable by its owner alone); later starts read the database back,
// jobs and all, and wait for the workers to report on the jobs they kept running.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "cli/commands.h"
#include "cli/stop_signal_wait.h"
#include "core/error.h"
#include "serve/api_server.h"
#include "serve/job_store.h"

namespace braid::cli {
namespace {

namespace fs = std::filesystem;

struct ServeFlags {
  std::string data_dir = "braid-serve";
  std::string host = "127.0.0.1";
  int port = 8470;
  std::string tls_cert, tls_key;
  double max_body_mb = 256;  // a checkpoint arrives in one PUT
  double rate = 200;
  double worker_timeout_s = 10;
  std::string rdzv_ports = "29600-29999";
};

// "A-B" -> {A, B}, a CLI::ValidationError otherwise.
std::pair<int, int> parse_port_range(const std::string& text) {
  const size_t dash = text.find('-');
  int first = 0, last = 0;
  try {
    if (dash == std::string::npos) throw std::invalid_argument("no dash");
    size_t used = 0;
    first = std::stoi(text.substr(0, dash), &used);
    if (used != dash) throw std::invalid_argument("not a number");
    last = std::stoi(text.substr(dash + 1), &used);
    if (used != text.size() - dash - 1) throw std::invalid_argument("not a number");
  } catch (const std::logic_error&) {
    throw CLI::ValidationError("--rdzv-ports",
                               "'" + text + "' is not FIRST-LAST (e.g. 29600-29999)");
  }
  if (first < 1 || last > 65535 || first > last)
    throw CLI::ValidationError("--rdzv-ports", "'" + text + "' needs 1 <= FIRST <= LAST <= 65535");
  return {first, last};
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void run_serve(const ServeFlags& f) {
  catch_stop_signals("braid serve");
  fs::create_directories(f.data_dir);
  serve::JobStore store((fs::path(f.data_dir) / "jobs.db").string());
  if (const auto admin = store.bootstrap_admin()) {
    const fs::path path = fs::path(f.data_dir) / "admin-token";
    {
      std::ofstream out(path);
      out << admin->second << "\n";
      if (!out.good()) BRAID_THROW(IoError, "braid serve: cannot write '", path.string(), "'");
    }
    ::chmod(path.c_str(), 0600);
    std::printf("braid serve: made the admin user; its token is in %s\n", path.c_str());
  }
  // Workers get a full timeout from now: the time the server was down is not theirs.
  const double now = unix_now();
  for (const serve::WorkerRecord& w : store.workers()) store.heartbeat(w.id, now);
  const size_t unfinished = store
                                .jobs_in({serve::JobState::queued, serve::JobState::starting,
                                          serve::JobState::running, serve::JobState::cancelling})
                                .size();
  serve::ApiOptions o;
  o.host = f.host;
  o.port = f.port;
  o.tls_cert = f.tls_cert;
  o.tls_key = f.tls_key;
  o.max_body_bytes = static_cast<size_t>(f.max_body_mb * (1 << 20));
  o.requests_per_second = f.rate;
  o.burst = 2 * f.rate;
  o.worker_timeout_s = f.worker_timeout_s;
  o.files_dir = (fs::path(f.data_dir) / "files").string();
  std::tie(o.rdzv_port_first, o.rdzv_port_last) = parse_port_range(f.rdzv_ports);
  serve::ApiServer server(store, o);
  server.start();
  std::printf("braid serve listening on %s://%s:%d (%zu unfinished jobs)\n",
              f.tls_cert.empty() ? "http" : "https", f.host.c_str(), server.port(), unfinished);
  std::fflush(stdout);
  const int sig = wait_for_stop_signal();
  std::fprintf(stderr, "braid serve: %s received, stopping\n", strsignal(sig));
  server.stop();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the job server: an HTTP API (and dashboard) that queues jobs, runs them on "
      "braid workers and keeps their history");
  cmd->add_option("--data-dir", flags->data_dir,
                  "where the database (jobs.db), the admin token and the jobs' files live")
      ->capture_default_str();
  cmd->add_option("--host", flags->host, "address to listen on (0.0.0.0: every interface)")
      ->capture_default_str();
  cmd->add_option("--port", flags->port, "TCP port (0: pick a free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--tls-cert", flags->tls_cert, "PEM certificate: serve HTTPS (with --tls-key)");
  cmd->add_option("--tls-key", flags->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--max-body-mb", flags->max_body_mb, "largest request body accepted (MiB)")
      ->check(CLI::Range(0.001, 4096.0))
      ->capture_default_str();
  cmd->add_option("--rate", flags->rate, "requests per second per token (twice that in a burst)")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--worker-timeout", flags->worker_timeout_s,
                  "seconds a worker may go unheard before its jobs count as failed")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--rdzv-ports", flags->rdzv_ports,
                  "ports for the stores of jobs placed on several workers (on each one's first "
                  "worker): FIRST-LAST, one per such job at a time")
      ->capture_default_str();
  cmd->callback([flags] { run_serve(*flags); });
}

}  // namespace braid::cli
