// `braid serve`'s HTTP API: JSON over HTTP(S) on one port, every request authenticated by a
// bearer token (serve/auth.h), limited in size and rate, answered from the job store
// (serve/job_store.h). The routes, all under /api/v1:
//
//   users        POST users {name, admin}                        admin: a user and its token
//   jobs         POST jobs {config, ranks, name, priority}       submit (the config checked)
//                GET  jobs                                       yours (an admin's: all)
//                GET  jobs/ID                                    one, with its ranks' health
//                POST jobs/ID/cancel
//                GET  jobs/ID/events?after=SEQ&limit=N           the ranks' event records
//                GET  jobs/ID/logs?after=SEQ&limit=N             the ranks' output lines
//                GET  jobs/ID/files/NAME                         a file the job's worker sent
//   workers      POST workers {host, slots, memory}              admin: register a host
//                POST workers/ID/heartbeat {running}             jobs to start and to cancel
//                POST jobs/ID/events {rank, events}              a worker's batch
//                POST jobs/ID/logs {lines: [{rank, line}]}
//                POST jobs/ID/state {state, exit_code, message}
//                PUT  jobs/ID/files/NAME                         a job's output, as bytes
//
// GET / is the dashboard (web/dashboard.html, built in), /static/ Debian's dygraphs.
//
// A user sees and cancels only their own jobs (another's is 404, as if it did not exist);
// an admin sees every job and is the only one to create users and register workers. Errors
// are {"error": "..."} with 400 (malformed), 401 (no or wrong token), 403 (not allowed),
// 404, 409 (a state that does not allow it), 413 (too large) or 429 (too many requests).
//
// Threads: cpp-httplib serves each connection on a pool thread; the store is the only
// shared state and is thread-safe. The scheduler runs on each heartbeat, under one lock.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "serve/job_store.h"
#include "serve/rate_limiter.h"

namespace httplib {
class Server;
}

namespace braid::serve {

struct ApiOptions {
  std::string host = "127.0.0.1";
  int port = 0;                   // 0: any free port (port() says which)
  std::string tls_cert, tls_key;  // PEM files: HTTPS when both are given
  size_t max_body_bytes = size_t{8} << 20;
  double requests_per_second = 200;  // per token (per address before authentication)
  double burst = 400;
  double worker_timeout_s = 10;  // a worker unheard this long has lost its jobs
  std::string files_dir;         // where the jobs' files go (jobs/ID/NAME)
  // Ports for the stores of jobs on several workers (on their first worker): one per job
  // placed, none shared by two of them at once.
  int rdzv_port_first = 29600, rdzv_port_last = 29999;
  std::string dashboard_dir = "/usr/share/javascript/dygraphs";  // Debian's libjs-dygraphs
};

class ApiServer {
 public:
  ApiServer(JobStore& store, ApiOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds (an Error naming the address when it cannot) and serves on a thread of its own.
  void start();
  // The port bound (after start()).
  int port() const { return port_; }
  void stop();

 private:
  void add_routes();
  // Queued jobs onto the live workers' free slots (serve/gang_scheduler.h).
  void schedule(double now);

  // Each rank's last events of a job (a status call's health table without a query; after a
  // restart it fills again from the database on first use).
  nlohmann::json health(const JobRecord& job);
  void note_events(int64_t job, int rank, const std::vector<nlohmann::json>& records);

  JobStore& store_;
  ApiOptions options_;
  std::mutex health_mu_;
  static constexpr size_t kHealthCacheJobs = 256;
  std::map<int64_t, std::vector<nlohmann::json>> health_;
  RateLimiter limiter_;
  std::unique_ptr<httplib::Server> http_;
  std::mutex schedule_mu_;
  int port_ = 0;
  int listen_socket_ = -1;  // set as cpp-httplib makes it
  struct Thread;
  std::unique_ptr<Thread> thread_;
};

}  // namespace braid::serve
