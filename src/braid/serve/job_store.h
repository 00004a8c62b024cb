// The job server's memory: users (with hashed tokens), jobs and their configs, the ranks'
// events and output lines, workers, in one SQLite database (serve/sqlite_db.h: WAL, a
// commit survives kill -9 of the server). Everything the server knows is here, so a server
// restarted after a crash reads back every job's state (unfinished_jobs) and goes on.
//
// A job's states: queued -> starting (placed on workers) -> running -> succeeded | failed;
// queued -> cancelled; starting | running -> cancelling -> cancelled (the workers stop the
// ranks, then say so); starting | running -> failed (a worker lost). transition() is a
// compare-and-set in one transaction: of two callers racing to move a job, one wins.
//
// Thread-safe: writes go through one connection behind a mutex (SQLite's writes are serial
// anyway); reads through a few reader connections of their own, so a status call never waits
// behind a write or the WAL checkpoint a commit may run. Schema version in PRAGMA
// user_version; a database of an older version is brought up to date when opened.
//
// A job on several workers (one `braid launch --nnodes` agent on each) has a rendezvous: the
// endpoint of its store on the first worker and a secret all its hosts share. It succeeds
// once every host has said so; the first host to fail fails it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/sqlite_db.h"

namespace braid::serve {

struct User {
  int64_t id = 0;
  std::string name;
  bool admin = false;
};

enum class JobState { queued, starting, running, cancelling, succeeded, failed, cancelled };
const char* job_state_name(JobState s);
JobState parse_job_state(const std::string& name);  // Error naming the accepted ones
bool is_final(JobState s);

struct HostRanks {  // ranks of a job on one worker (node rank = index in the placement)
  int64_t worker = 0;
  int ranks = 0;
};

struct Rendezvous {      // of a job on several workers
  std::string endpoint;  // HOST:PORT on its first worker
  std::string secret;    // hex, BRAID_SECRET on every host
};

struct JobRecord {
  int64_t id = 0;
  int64_t user = 0;
  std::string user_name;
  std::string name;
  nlohmann::json config;
  int ranks = 1;    // every process of the job
  int servers = 0;  // of them, a parameter-server job's servers (the last ranks)
  int priority = 0;
  JobState state = JobState::queued;
  std::string message;  // why it failed or was cancelled
  int exit_code = 0;
  double submitted = 0, started = 0, finished = 0;  // Unix seconds; 0: not yet
  std::vector<HostRanks> placement;
  Rendezvous rendezvous;                // empty on one worker
  std::vector<int64_t> hosts_started;   // workers that said they started their part
  std::vector<int64_t> hosts_finished;  // workers that said the job succeeded on them
  nlohmann::json to_json() const;       // without the rendezvous's secret
};

struct EventRecord {
  int64_t seq = 0;  // per job, from 1, no gaps
  int rank = 0;
  nlohmann::json record;
};

struct LogLine {
  int64_t seq = 0;
  int rank = 0;
  std::string line;
};

struct WorkerRecord {
  int64_t id = 0;
  std::string host;
  std::string address;  // where the other hosts reach it (what the server saw, or given)
  int slots = 0;
  int64_t memory = 0;
  double last_heartbeat = 0;
};

class JobStore {
 public:
  static constexpr int kSchemaVersion = 2;
  explicit JobStore(const std::string& path);

  // Users. A token is returned once, here; the store keeps its hash.
  std::pair<User, std::string> create_user(const std::string& name, bool admin);
  // The first admin when there is no user yet (nullopt otherwise).
  std::optional<std::pair<User, std::string>> bootstrap_admin();
  std::optional<User> user_for_token(const std::string& token);

  // Jobs.
  JobRecord submit(int64_t user, const std::string& name, const nlohmann::json& config, int ranks,
                   int priority, double now, int servers = 0);
  std::optional<JobRecord> job(int64_t id);
  std::vector<JobRecord> jobs(std::optional<int64_t> user);  // newest first
  std::vector<JobRecord> jobs_in(const std::vector<JobState>& states);
  // Moves job `id` from any of `from` to `to`; false (and nothing written) when it is in none
  // of them. An edge the state machine does not have is an Error.
  bool transition(int64_t id, const std::vector<JobState>& from, JobState to, double now,
                  const std::string& message = "", int exit_code = 0);
  // queued -> starting with its placement (and, on several workers, its rendezvous), in one
  // transaction.
  bool start(int64_t id, const std::vector<HostRanks>& placement, double now,
             const Rendezvous& rendezvous = {});
  // Worker `worker` says it runs its part of the job (its first report moves the job from
  // starting to running); false when the job is no longer live or not placed there.
  bool host_started(int64_t id, int64_t worker);
  // Worker `worker` says the job succeeded on its host: once every host of the placement has,
  // the job has succeeded (true); false while some host has not, or when the job is no longer
  // live (nothing written then).
  bool host_succeeded(int64_t id, int64_t worker, double now);

  // The ranks' events and output lines, a batch a transaction; the job's event count after.
  // A batch that says where it begins in its sender's stream (`first`: the index of its first
  // record there, from 0; a rank's events, or one worker's output lines of the job) is
  // stored once even when sent again (the answer to the first send was lost with a killed
  // server): what the store holds of it already is skipped. first < 0: stored as it comes.
  int64_t append_events(int64_t job, int rank, const std::vector<nlohmann::json>& records,
                        int64_t first = -1);
  std::vector<EventRecord> events_since(int64_t job, int64_t after, int limit);
  // The same page as one JSON array's text, {"seq", "rank", "record"} each, the records as
  // stored (not parsed and written again: a dashboard's page of 20,000 costs half as much).
  std::string events_since_json(int64_t job, int64_t after, int limit);
  int64_t event_count(int64_t job);
  void append_logs(int64_t job, const std::vector<std::pair<int, std::string>>& lines,
                   int64_t worker = 0, int64_t first = -1);
  std::vector<LogLine> logs_since(int64_t job, int64_t after, int limit);

  // Workers: registering a host again keeps its id.
  int64_t register_worker(const std::string& host, const std::string& address, int slots,
                          int64_t memory, double now);
  void heartbeat(int64_t worker, double now);
  std::optional<WorkerRecord> worker(int64_t id);
  std::vector<WorkerRecord> workers();

 private:
  static constexpr int kReaders = 4;
  struct Reader {
    std::mutex mu;
    std::unique_ptr<Database> db;
  };
  // A reader connection for one read: a free one, else the next in turn once it is free.
  class Lease {
   public:
    explicit Lease(JobStore& store);
    Database& db() { return *db_; }

   private:
    std::unique_lock<std::mutex> lock_;
    Database* db_ = nullptr;
  };

  JobRecord read_job(Statement& s);
  // In a write transaction: job `id`'s placed workers and its list `column` (hosts_started or
  // hosts_finished) with `worker` added; nullopt when the job is in none of the `live` states
  // or `worker` has no share of it.
  struct HostLists {
    std::vector<int64_t> placed, list;
  };
  std::optional<HostLists> add_host(int64_t id, int64_t worker, const char* column,
                                    const std::vector<JobState>& live);
  // In a write transaction: how many of a batch of `n` from `first` on the store holds
  // already (skipped), noting the stream's new length.
  int64_t already_stored(int64_t job, const std::string& stream, int64_t first, int64_t n);
  std::mutex mu_;  // the writer's
  Database db_;
  std::vector<std::unique_ptr<Reader>> readers_;
  std::atomic<size_t> next_reader_{0};
};

}  // namespace braid::serve
