#include "serve/job_store.h"

#include <algorithm>

#include "core/error.h"
#include "serve/auth.h"

namespace braid::serve {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS users (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, admin INTEGER NOT NULL,
  token_hash TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY, user INTEGER NOT NULL REFERENCES users(id), name TEXT NOT NULL,
  config TEXT NOT NULL, ranks INTEGER NOT NULL, priority INTEGER NOT NULL,
  servers INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', exit_code INTEGER NOT NULL DEFAULT 0,
  submitted REAL NOT NULL, started REAL NOT NULL DEFAULT 0, finished REAL NOT NULL DEFAULT 0,
  placement TEXT NOT NULL DEFAULT '[]', events INTEGER NOT NULL DEFAULT 0,
  logs INTEGER NOT NULL DEFAULT 0, rendezvous TEXT NOT NULL DEFAULT '{}',
  hosts_started TEXT NOT NULL DEFAULT '[]', hosts_finished TEXT NOT NULL DEFAULT '[]');
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state);
CREATE TABLE IF NOT EXISTS events (
  job INTEGER NOT NULL REFERENCES jobs(id), seq INTEGER NOT NULL, rank INTEGER NOT NULL,
  record TEXT NOT NULL, PRIMARY KEY (job, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS logs (
  job INTEGER NOT NULL REFERENCES jobs(id), seq INTEGER NOT NULL, rank INTEGER NOT NULL,
  line TEXT NOT NULL, PRIMARY KEY (job, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS streams (
  job INTEGER NOT NULL REFERENCES jobs(id), stream TEXT NOT NULL, length INTEGER NOT NULL,
  PRIMARY KEY (job, stream)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workers (
  id INTEGER PRIMARY KEY, host TEXT NOT NULL UNIQUE, slots INTEGER NOT NULL,
  memory INTEGER NOT NULL, last_heartbeat REAL NOT NULL, address TEXT NOT NULL DEFAULT '');
)sql";

// From schema version 1: jobs on several workers.
constexpr const char* kToVersion2 = R"sql(
ALTER TABLE jobs ADD COLUMN rendezvous TEXT NOT NULL DEFAULT '{}';
ALTER TABLE jobs ADD COLUMN hosts_started TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN hosts_finished TEXT NOT NULL DEFAULT '[]';
ALTER TABLE workers ADD COLUMN address TEXT NOT NULL DEFAULT '';
)sql";

constexpr const char* kJobColumns =
    "SELECT jobs.id, user, users.name, jobs.name, config, ranks, priority, state, message, "
    "exit_code, submitted, started, finished, placement, servers, rendezvous, hosts_started, "
    "hosts_finished "
    "FROM jobs JOIN users ON users.id = jobs.user ";

bool edge(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::queued:
      return to == S::starting || to == S::cancelled || to == S::failed;
    case S::starting:
      return to == S::running || to == S::cancelling || to == S::failed || to == S::succeeded;
    case S::running:
      return to == S::succeeded || to == S::failed || to == S::cancelling;
    case S::cancelling:
      return to == S::cancelled || to == S::failed || to == S::succeeded;
    default:
      return false;
  }
}

}  // namespace

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::queued:
      return "queued";
    case JobState::starting:
      return "starting";
    case JobState::running:
      return "running";
    case JobState::cancelling:
      return "cancelling";
    case JobState::succeeded:
      return "succeeded";
    case JobState::failed:
      return "failed";
    case JobState::cancelled:
      return "cancelled";
  }
  return "?";
}

JobState parse_job_state(const std::string& name) {
  for (const JobState s :
       {JobState::queued, JobState::starting, JobState::running, JobState::cancelling,
        JobState::succeeded, JobState::failed, JobState::cancelled})
    if (name == job_state_name(s)) return s;
  BRAID_THROW(Error, "job state '", name,
              "': expected queued, starting, running, cancelling, succeeded, failed or "
              "cancelled");
}

bool is_final(JobState s) {
  return s == JobState::succeeded || s == JobState::failed || s == JobState::cancelled;
}

nlohmann::json JobRecord::to_json() const {
  nlohmann::json hosts = nlohmann::json::array();
  for (const HostRanks& h : placement) hosts.push_back({{"worker", h.worker}, {"ranks", h.ranks}});
  return {{"id", id},
          {"user", user_name},
          {"name", name},
          {"config", config},
          {"ranks", ranks},
          {"servers", servers},
          {"priority", priority},
          {"state", job_state_name(state)},
          {"message", message},
          {"exit_code", exit_code},
          {"submitted", submitted},
          {"started", started},
          {"finished", finished},
          {"placement", hosts},
          {"rendezvous", rendezvous.endpoint},
          {"hosts_started", hosts_started},
          {"hosts_finished", hosts_finished}};
}

JobStore::JobStore(const std::string& path) : db_(path) {
  // A file cut short or with a damaged page opens without complaint; its structure is
  // checked here, once, so the server refuses it at start rather than mid-job.
  Statement check = db_.prepare("PRAGMA quick_check");
  BRAID_CHECK(check.step() && check.text(0) == "ok", "job database '", path,
              "' is damaged (SQLite's quick_check: ", check.text(0),
              "); move it aside and start braid serve again, or restore a copy");
  Statement v = db_.prepare("PRAGMA user_version");
  v.step();
  const int64_t version = v.integer(0);
  BRAID_CHECK(version <= kSchemaVersion, "job database '", path, "' has schema version ", version,
              ", newer than this braid's ", kSchemaVersion,
              "; run the braid that made it, or start this one on another --data-dir");
  {
    Database::Transaction t(db_);
    if (version == 1) db_.exec(kToVersion2);
    db_.exec(kSchema);
    if (version < kSchemaVersion)
      db_.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
    t.commit();
  }
  for (int i = 0; i < kReaders; ++i) {
    readers_.push_back(std::make_unique<Reader>());
    readers_.back()->db = std::make_unique<Database>(path);
  }
}

JobStore::Lease::Lease(JobStore& store) {
  const size_t n = store.readers_.size(), first = store.next_reader_++ % n;
  for (size_t k = 0; k < n; ++k) {
    Reader& r = *store.readers_[(first + k) % n];
    if (std::unique_lock lock(r.mu, std::try_to_lock); lock.owns_lock()) {
      lock_ = std::move(lock);
      db_ = r.db.get();
      return;
    }
  }
  Reader& r = *store.readers_[first];  // all busy: wait for this one's turn
  lock_ = std::unique_lock(r.mu);
  db_ = r.db.get();
}

std::pair<User, std::string> JobStore::create_user(const std::string& name, bool admin) {
  BRAID_CHECK(!name.empty() && name.size() <= 64, "a user name has 1 to 64 characters, got '", name,
              "'");
  const std::string token = new_token();
  const std::lock_guard lock(mu_);
  Statement exists = db_.prepare("SELECT 1 FROM users WHERE name = ?");
  exists.bind(1, name);
  BRAID_CHECK(!exists.step(), "a user named '", name, "' exists already; choose another name");
  db_.prepare("INSERT INTO users (name, admin, token_hash) VALUES (?, ?, ?)")
      .bind(1, name)
      .bind(2, int64_t{admin})
      .bind(3, token_hash(token))
      .run();
  return {User{db_.last_insert_id(), name, admin}, token};
}

std::optional<std::pair<User, std::string>> JobStore::bootstrap_admin() {
  {
    const std::lock_guard lock(mu_);
    Statement any = db_.prepare("SELECT 1 FROM users LIMIT 1");
    if (any.step()) return std::nullopt;
  }
  return create_user("admin", true);
}

std::optional<User> JobStore::user_for_token(const std::string& token) {
  Lease reader(*this);
  Database::Cached s = reader.db().cached("SELECT id, name, admin FROM users WHERE token_hash = ?");
  s->bind(1, token_hash(token));
  if (!s->step()) return std::nullopt;
  return User{s->integer(0), s->text(1), s->integer(2) != 0};
}

JobRecord JobStore::submit(int64_t user, const std::string& name, const nlohmann::json& config,
                           int ranks, int priority, double now, int servers) {
  BRAID_CHECK(ranks >= 1 && ranks <= 4096, "a job has 1 to 4096 ranks, got ", ranks);
  BRAID_CHECK(servers >= 0 && servers < ranks, "a parameter-server job's servers are some of its ",
              ranks, " ranks, leaving at least one worker; got ", servers, " servers");
  int64_t id = 0;
  {
    const std::lock_guard lock(mu_);
    db_.prepare(
           "INSERT INTO jobs (user, name, config, ranks, priority, state, submitted, servers) "
           "VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)")
        .bind(1, user)
        .bind(2, name)
        .bind(3, config.dump())
        .bind(4, int64_t{ranks})
        .bind(5, int64_t{priority})
        .bind(6, now)
        .bind(7, int64_t{servers})
        .run();
    id = db_.last_insert_id();
  }
  return *job(id);
}

JobRecord JobStore::read_job(Statement& s) {
  JobRecord j;
  j.id = s.integer(0);
  j.user = s.integer(1);
  j.user_name = s.text(2);
  j.name = s.text(3);
  j.config = nlohmann::json::parse(s.text(4));
  j.ranks = static_cast<int>(s.integer(5));
  j.priority = static_cast<int>(s.integer(6));
  j.state = parse_job_state(s.text(7));
  j.message = s.text(8);
  j.exit_code = static_cast<int>(s.integer(9));
  j.submitted = s.real(10);
  j.started = s.real(11);
  j.finished = s.real(12);
  for (const auto& h : nlohmann::json::parse(s.text(13)))
    j.placement.push_back({h.at("worker").get<int64_t>(), h.at("ranks").get<int>()});
  j.servers = static_cast<int>(s.integer(14));
  const auto rendezvous = nlohmann::json::parse(s.text(15));
  j.rendezvous = {rendezvous.value("endpoint", ""), rendezvous.value("secret", "")};
  j.hosts_started = nlohmann::json::parse(s.text(16)).get<std::vector<int64_t>>();
  j.hosts_finished = nlohmann::json::parse(s.text(17)).get<std::vector<int64_t>>();
  return j;
}

std::optional<JobRecord> JobStore::job(int64_t id) {
  Lease reader(*this);
  Database::Cached s = reader.db().cached(std::string(kJobColumns) + "WHERE jobs.id = ?");
  s->bind(1, id);
  if (!s->step()) return std::nullopt;
  return read_job(*s);
}

std::vector<JobRecord> JobStore::jobs(std::optional<int64_t> user) {
  Lease reader(*this);
  Statement s =
      reader.db().prepare(std::string(kJobColumns) + (user ? "WHERE user = ? ORDER BY jobs.id DESC"
                                                           : "ORDER BY jobs.id DESC"));
  if (user) s.bind(1, *user);
  std::vector<JobRecord> out;
  while (s.step()) out.push_back(read_job(s));
  return out;
}

std::vector<JobRecord> JobStore::jobs_in(const std::vector<JobState>& states) {
  std::vector<JobRecord> out;
  for (JobRecord& j : jobs(std::nullopt))
    if (std::find(states.begin(), states.end(), j.state) != states.end())
      out.push_back(std::move(j));
  std::reverse(out.begin(), out.end());  // oldest first
  return out;
}

bool JobStore::transition(int64_t id, const std::vector<JobState>& from, JobState to, double now,
                          const std::string& message, int exit_code) {
  for (const JobState f : from)
    BRAID_CHECK(edge(f, to), "job ", id, ": no move from ", job_state_name(f), " to ",
                job_state_name(to));
  const std::lock_guard lock(mu_);
  Database::Transaction t(db_);
  Statement s = db_.prepare("SELECT state FROM jobs WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) return false;
  const JobState now_in = parse_job_state(s.text(0));
  if (std::find(from.begin(), from.end(), now_in) == from.end()) return false;
  db_.prepare(
         "UPDATE jobs SET state = ?, message = CASE WHEN ? = '' THEN message ELSE ? END, "
         "exit_code = ?, started = CASE WHEN ? = 'running' AND started = 0 THEN ? ELSE started "
         "END, finished = CASE WHEN ? THEN ? ELSE finished END WHERE id = ?")
      .bind(1, std::string(job_state_name(to)))
      .bind(2, message)
      .bind(3, message)
      .bind(4, int64_t{exit_code})
      .bind(5, std::string(job_state_name(to)))
      .bind(6, now)
      .bind(7, int64_t{is_final(to)})
      .bind(8, now)
      .bind(9, id)
      .run();
  t.commit();
  return true;
}

bool JobStore::start(int64_t id, const std::vector<HostRanks>& placement, double now,
                     const Rendezvous& rendezvous) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const HostRanks& h : placement) hosts.push_back({{"worker", h.worker}, {"ranks", h.ranks}});
  const nlohmann::json meet =
      rendezvous.endpoint.empty()
          ? nlohmann::json::object()
          : nlohmann::json{{"endpoint", rendezvous.endpoint}, {"secret", rendezvous.secret}};
  const std::lock_guard lock(mu_);
  db_.prepare(
         "UPDATE jobs SET state = 'starting', placement = ?, started = ?, rendezvous = ?, "
         "hosts_started = '[]', hosts_finished = '[]' WHERE id = ? AND state = 'queued'")
      .bind(1, hosts.dump())
      .bind(2, now)
      .bind(3, meet.dump())
      .bind(4, id)
      .run();
  return db_.changes() == 1;
}

std::optional<JobStore::HostLists> JobStore::add_host(int64_t id, int64_t worker,
                                                      const char* column,
                                                      const std::vector<JobState>& live) {
  Statement s =
      db_.prepare(std::string("SELECT state, placement, ") + column + " FROM jobs WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  const JobState state = parse_job_state(s.text(0));
  if (std::find(live.begin(), live.end(), state) == live.end()) return std::nullopt;
  HostLists out;
  out.list = nlohmann::json::parse(s.text(2)).get<std::vector<int64_t>>();
  for (const auto& h : nlohmann::json::parse(s.text(1)))
    out.placed.push_back(h.at("worker").get<int64_t>());
  if (std::find(out.placed.begin(), out.placed.end(), worker) == out.placed.end())
    return std::nullopt;
  if (std::find(out.list.begin(), out.list.end(), worker) == out.list.end())
    out.list.push_back(worker);
  return out;
}

bool JobStore::host_started(int64_t id, int64_t worker) {
  const std::lock_guard lock(mu_);
  Database::Transaction t(db_);
  const auto hosts = add_host(id, worker, "hosts_started", {JobState::starting, JobState::running});
  if (!hosts) return false;
  db_.prepare("UPDATE jobs SET hosts_started = ?, state = 'running' WHERE id = ?")
      .bind(1, nlohmann::json(hosts->list).dump())
      .bind(2, id)
      .run();
  t.commit();
  return true;
}

bool JobStore::host_succeeded(int64_t id, int64_t worker, double now) {
  const std::lock_guard lock(mu_);
  Database::Transaction t(db_);
  const auto hosts = add_host(id, worker, "hosts_finished",
                              {JobState::starting, JobState::running, JobState::cancelling});
  if (!hosts) return false;
  const bool all = hosts->list.size() == hosts->placed.size();
  db_.prepare(
         "UPDATE jobs SET hosts_finished = ?, state = CASE WHEN ? THEN 'succeeded' ELSE state END, "
         "exit_code = CASE WHEN ? THEN 0 ELSE exit_code END, "
         "finished = CASE WHEN ? THEN ? ELSE finished END WHERE id = ?")
      .bind(1, nlohmann::json(hosts->list).dump())
      .bind(2, int64_t{all})
      .bind(3, int64_t{all})
      .bind(4, int64_t{all})
      .bind(5, now)
      .bind(6, id)
      .run();
  t.commit();
  return all;
}

int64_t JobStore::already_stored(int64_t job, const std::string& stream, int64_t first, int64_t n) {
  if (first < 0) return 0;
  int64_t length = 0;
  {
    Database::Cached known = db_.cached("SELECT length FROM streams WHERE job = ? AND stream = ?");
    known->bind(1, job).bind(2, stream);
    if (known->step()) length = known->integer(0);
  }
  db_.cached(
         "INSERT INTO streams (job, stream, length) VALUES (?, ?, ?) ON CONFLICT(job, stream) "
         "DO UPDATE SET length = max(length, excluded.length)")
      ->bind(1, job)
      .bind(2, stream)
      .bind(3, first + n)
      .run();
  return std::clamp<int64_t>(length - first, 0, n);
}

int64_t JobStore::append_events(int64_t job, int rank, const std::vector<nlohmann::json>& records,
                                int64_t first) {
  const std::lock_guard lock(mu_);
  Database::Transaction t(db_);
  int64_t seq = 0;
  {
    Database::Cached count = db_.cached("SELECT events FROM jobs WHERE id = ?");
    count->bind(1, job);
    BRAID_CHECK(count->step(), "no job ", job);
    seq = count->integer(0);
  }
  const int64_t skip = already_stored(job, "events of rank " + std::to_string(rank), first,
                                      static_cast<int64_t>(records.size()));
  {
    Database::Cached insert =
        db_.cached("INSERT INTO events (job, seq, rank, record) VALUES (?, ?, ?, ?)");
    for (size_t i = static_cast<size_t>(skip); i < records.size(); ++i) {
      insert->bind(1, job).bind(2, ++seq).bind(3, int64_t{rank}).bind(4, records[i].dump()).run();
      insert->reset();
    }
  }
  db_.cached("UPDATE jobs SET events = ? WHERE id = ?")->bind(1, seq).bind(2, job).run();
  t.commit();
  return seq;
}

std::vector<EventRecord> JobStore::events_since(int64_t job, int64_t after, int limit) {
  Lease reader(*this);
  Statement s = reader.db().prepare(
      "SELECT seq, rank, record FROM events WHERE job = ? AND seq > ? ORDER BY seq LIMIT ?");
  s.bind(1, job).bind(2, after).bind(3, int64_t{limit});
  std::vector<EventRecord> out;
  while (s.step())
    out.push_back({s.integer(0), static_cast<int>(s.integer(1)), nlohmann::json::parse(s.text(2))});
  return out;
}

std::string JobStore::events_since_json(int64_t job, int64_t after, int limit) {
  Lease reader(*this);
  Statement s = reader.db().prepare(
      "SELECT seq, rank, record FROM events WHERE job = ? AND seq > ? ORDER BY seq LIMIT ?");
  s.bind(1, job).bind(2, after).bind(3, int64_t{limit});
  std::string out = "[";
  while (s.step()) {
    if (out.size() > 1) out += ',';
    out += "{\"seq\":" + std::to_string(s.integer(0)) +
           ",\"rank\":" + std::to_string(s.integer(1)) + ",\"record\":" + s.text(2) + "}";
  }
  return out + "]";
}

int64_t JobStore::event_count(int64_t job) {
  Lease reader(*this);
  Database::Cached s = reader.db().cached("SELECT events FROM jobs WHERE id = ?");
  s->bind(1, job);
  return s->step() ? s->integer(0) : 0;
}

void JobStore::append_logs(int64_t job, const std::vector<std::pair<int, std::string>>& lines,
                           int64_t worker, int64_t first) {
  const std::lock_guard lock(mu_);
  Database::Transaction t(db_);
  Statement count = db_.prepare("SELECT logs FROM jobs WHERE id = ?");
  count.bind(1, job);
  BRAID_CHECK(count.step(), "no job ", job);
  int64_t seq = count.integer(0);
  const int64_t skip = already_stored(job, "output of worker " + std::to_string(worker), first,
                                      static_cast<int64_t>(lines.size()));
  Statement insert = db_.prepare("INSERT INTO logs (job, seq, rank, line) VALUES (?, ?, ?, ?)");
  for (size_t i = static_cast<size_t>(skip); i < lines.size(); ++i) {
    insert.bind(1, job).bind(2, ++seq).bind(3, int64_t{lines[i].first}).bind(4, lines[i].second);
    insert.run();
    insert.reset();
  }
  db_.prepare("UPDATE jobs SET logs = ? WHERE id = ?").bind(1, seq).bind(2, job).run();
  t.commit();
}

std::vector<LogLine> JobStore::logs_since(int64_t job, int64_t after, int limit) {
  Lease reader(*this);
  Statement s = reader.db().prepare(
      "SELECT seq, rank, line FROM logs WHERE job = ? AND seq > ? ORDER BY seq LIMIT ?");
  s.bind(1, job).bind(2, after).bind(3, int64_t{limit});
  std::vector<LogLine> out;
  while (s.step()) out.push_back({s.integer(0), static_cast<int>(s.integer(1)), s.text(2)});
  return out;
}

int64_t JobStore::register_worker(const std::string& host, const std::string& address, int slots,
                                  int64_t memory, double now) {
  BRAID_CHECK(!host.empty() && slots >= 1, "a worker names its host and has at least one slot (",
              "host '", host, "', ", slots, " slots)");
  const std::lock_guard lock(mu_);
  db_.prepare(
         "INSERT INTO workers (host, slots, memory, last_heartbeat, address) "
         "VALUES (?, ?, ?, ?, ?) ON CONFLICT(host) DO UPDATE SET slots = excluded.slots, "
         "memory = excluded.memory, last_heartbeat = excluded.last_heartbeat, "
         "address = excluded.address")
      .bind(1, host)
      .bind(2, int64_t{slots})
      .bind(3, memory)
      .bind(4, now)
      .bind(5, address)
      .run();
  Statement s = db_.prepare("SELECT id FROM workers WHERE host = ?");
  s.bind(1, host);
  s.step();
  return s.integer(0);
}

void JobStore::heartbeat(int64_t worker, double now) {
  const std::lock_guard lock(mu_);
  db_.prepare("UPDATE workers SET last_heartbeat = ? WHERE id = ?")
      .bind(1, now)
      .bind(2, worker)
      .run();
  BRAID_CHECK(db_.changes() == 1, "no worker ", worker, "; register again");
}

std::optional<WorkerRecord> JobStore::worker(int64_t id) {
  for (const WorkerRecord& w : workers())
    if (w.id == id) return w;
  return std::nullopt;
}

std::vector<WorkerRecord> JobStore::workers() {
  Lease reader(*this);
  Statement s = reader.db().prepare(
      "SELECT id, host, address, slots, memory, last_heartbeat FROM workers ORDER BY id");
  std::vector<WorkerRecord> out;
  while (s.step())
    out.push_back({s.integer(0), s.text(1), s.text(2), static_cast<int>(s.integer(3)), s.integer(4),
                   s.real(5)});
  return out;
}

}  // namespace braid::serve
