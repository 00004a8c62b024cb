// The job server's database (serve/job_store.h) on real files: what it keeps, its state
// machine, its tokens, and what survives a kill -9 of the process writing it.
#include "serve/job_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "serve/auth.h"
#include "serve/sqlite_db.h"
#include "temp_dir.h"

namespace braid::serve {
namespace {

using braid::testing::TempDir;
using nlohmann::json;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(JobStore, KeepsJobsUsersAndWorkersAcrossReopening) {
  const TempDir tmp;
  const std::string db = tmp.file("jobs.db");
  int64_t id = 0, alice = 0;
  {
    JobStore s(db);
    alice = s.create_user("alice", false).first.id;
    id = s.submit(alice, "mlp <b>", json{{"model", "mlp"}, {"steps", 5}}, 2, 3, 100.5).id;
    const int64_t first = s.register_worker("host-a", "10.0.0.1", 2, 1 << 30, 1);
    EXPECT_EQ(s.register_worker("host-a", "10.0.0.2", 4, 1, 2), first)
        << "a host registered again keeps its id";
  }
  JobStore s(db);
  const std::optional<JobRecord> j = s.job(id);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->name, "mlp <b>");
  EXPECT_EQ(j->user, alice);
  EXPECT_EQ(j->user_name, "alice");
  EXPECT_EQ(j->config, (json{{"model", "mlp"}, {"steps", 5}}));
  EXPECT_EQ(j->ranks, 2);
  EXPECT_EQ(j->priority, 3);
  EXPECT_EQ(j->state, JobState::queued);
  EXPECT_EQ(j->submitted, 100.5);
  ASSERT_EQ(s.workers().size(), 1u);
  EXPECT_EQ(s.workers()[0].slots, 4);
  EXPECT_EQ(s.workers()[0].address, "10.0.0.2");
  EXPECT_FALSE(s.job(id + 1));
}

// A job on two workers: its rendezvous is kept, and it succeeds once both hosts have said
// so (either one twice is still one), not at the first.
TEST(JobStore, AJobOnSeveralWorkersSucceedsOnceEveryHostHas) {
  const TempDir tmp;
  JobStore s(tmp.file("jobs.db"));
  const int64_t admin = s.create_user("admin", true).first.id;
  const int64_t id = s.submit(admin, "two hosts", json::object(), 3, 0, 1).id;
  ASSERT_TRUE(s.start(id, {{7, 2}, {9, 1}}, 2, {"10.0.0.7:29600", "abcd"}));
  EXPECT_EQ(s.job(id)->rendezvous.endpoint, "10.0.0.7:29600");
  EXPECT_EQ(s.job(id)->rendezvous.secret, "abcd");
  EXPECT_EQ(s.job(id)->to_json().dump().find("abcd"), std::string::npos)
      << "the secret is not shown";
  EXPECT_FALSE(s.host_succeeded(id, 8, 3)) << "worker 8 has no share of it";
  EXPECT_FALSE(s.host_succeeded(id, 9, 3));
  EXPECT_FALSE(s.host_succeeded(id, 9, 3));
  EXPECT_EQ(s.job(id)->state, JobState::starting);
  EXPECT_EQ(s.job(id)->hosts_finished, (std::vector<int64_t>{9}));
  EXPECT_TRUE(s.host_succeeded(id, 7, 4));
  EXPECT_EQ(s.job(id)->state, JobState::succeeded);
  EXPECT_EQ(s.job(id)->finished, 4);
  EXPECT_FALSE(s.host_succeeded(id, 7, 5)) << "a final job is not moved again";

  // A host's failure ends it whatever the others say after.
  const int64_t other = s.submit(admin, "fails", json::object(), 2, 0, 1).id;
  ASSERT_TRUE(s.start(other, {{7, 1}, {9, 1}}, 2, {"10.0.0.7:29601", "ef"}));
  EXPECT_FALSE(s.host_succeeded(other, 7, 3));
  ASSERT_TRUE(s.transition(other, {JobState::starting}, JobState::failed, 3, "host 9 failed"));
  EXPECT_FALSE(s.host_succeeded(other, 9, 4));
  EXPECT_EQ(s.job(other)->state, JobState::failed);
}

// A batch sent again (its answer lost with a killed server), alone or with newer records
// behind it, is stored once; each sender's stream counts apart; without `first` a batch is
// stored as it comes.
TEST(JobStore, ABatchSentAgainIsStoredOnce) {
  const TempDir tmp;
  JobStore s(tmp.file("jobs.db"));
  const int64_t u = s.create_user("u", false).first.id;
  const int64_t id = s.submit(u, "j", json::object(), 2, 0, 1).id;
  auto step = [](int i) { return json{{"event", "train"}, {"step", i}}; };
  EXPECT_EQ(s.append_events(id, 0, {step(1), step(2)}, 0), 2);
  EXPECT_EQ(s.append_events(id, 0, {step(1), step(2)}, 0), 2) << "the same batch again";
  EXPECT_EQ(s.append_events(id, 0, {step(1), step(2), step(3)}, 0), 3) << "again, and one more";
  EXPECT_EQ(s.append_events(id, 1, {step(1)}, 0), 4) << "rank 1's stream is its own";
  EXPECT_EQ(s.append_events(id, 0, {step(4)}, 3), 5);
  std::vector<std::pair<int, int>> stored;
  for (const EventRecord& e : s.events_since(id, 0, 100))
    stored.emplace_back(e.rank, e.record.value("step", 0));
  EXPECT_EQ(stored, (std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {0, 3}, {1, 1}, {0, 4}}));
  EXPECT_EQ(s.append_events(id, 0, {step(9)}), 6) << "no first: stored as it comes";

  s.append_logs(id, {{0, "a"}, {0, "b"}}, 7, 0);
  s.append_logs(id, {{0, "a"}, {0, "b"}, {1, "c"}}, 7, 0);
  s.append_logs(id, {{0, "a"}}, 8, 0);  // another worker's output
  std::vector<std::string> lines;
  for (const LogLine& l : s.logs_since(id, 0, 100)) lines.push_back(l.line);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b", "c", "a"}));
}

// A database written by the first schema (before jobs on several workers) opens, keeps its
// jobs and workers, and takes the new columns.
TEST(JobStore, ADatabaseOfSchemaVersionOneIsBroughtUpToDate) {
  const TempDir tmp;
  const std::string path = tmp.file("jobs.db");
  {
    Database db(path);
    db.exec(R"sql(
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, admin INTEGER NOT NULL,
  token_hash TEXT NOT NULL UNIQUE);
CREATE TABLE jobs (id INTEGER PRIMARY KEY, user INTEGER NOT NULL REFERENCES users(id),
  name TEXT NOT NULL, config TEXT NOT NULL, ranks INTEGER NOT NULL, priority INTEGER NOT NULL,
  servers INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
  exit_code INTEGER NOT NULL DEFAULT 0, submitted REAL NOT NULL, started REAL NOT NULL DEFAULT 0,
  finished REAL NOT NULL DEFAULT 0, placement TEXT NOT NULL DEFAULT '[]',
  events INTEGER NOT NULL DEFAULT 0, logs INTEGER NOT NULL DEFAULT 0);
CREATE TABLE workers (id INTEGER PRIMARY KEY, host TEXT NOT NULL UNIQUE, slots INTEGER NOT NULL,
  memory INTEGER NOT NULL, last_heartbeat REAL NOT NULL);
INSERT INTO users VALUES (1, 'admin', 1, 'x');
INSERT INTO jobs (user, name, config, ranks, priority, state, submitted, placement)
  VALUES (1, 'old', '{}', 2, 0, 'running', 5, '[{"worker":1,"ranks":2}]');
INSERT INTO workers VALUES (1, 'host-a', 2, 0, 6);
PRAGMA user_version = 1;
)sql");
  }
  JobStore s(path);
  const auto j = s.job(1);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->name, "old");
  EXPECT_EQ(j->state, JobState::running);
  EXPECT_TRUE(j->rendezvous.endpoint.empty());
  ASSERT_EQ(s.workers().size(), 1u);
  EXPECT_EQ(s.workers()[0].address, "");
  EXPECT_TRUE(s.host_succeeded(1, 1, 7));
  Database db(path);
  Statement v = db.prepare("PRAGMA user_version");
  ASSERT_TRUE(v.step());
  EXPECT_EQ(v.integer(0), JobStore::kSchemaVersion);
}

TEST(JobStore, AUsersJobsAreTheirsAndNewestFirst) {
  const TempDir tmp;
  JobStore s(tmp.file("jobs.db"));
  const int64_t a = s.create_user("a", false).first.id, b = s.create_user("b", false).first.id;
  const int64_t a1 = s.submit(a, "1", json::object(), 1, 0, 1).id;
  const int64_t b1 = s.submit(b, "2", json::object(), 1, 0, 2).id;
  const int64_t a2 = s.submit(a, "3", json::object(), 1, 0, 3).id;
  std::vector<int64_t> ids;
  for (const JobRecord& j : s.jobs(a)) ids.push_back(j.id);
  EXPECT_EQ(ids, (std::vector<int64_t>{a2, a1}));
  EXPECT_EQ(s.jobs(std::nullopt).size(), 3u);
  EXPECT_EQ(s.jobs(b).front().id, b1);
  EXPECT_THROW(s.create_user("a", true), Error) << "names are unique";
}

TEST(JobStore, TheStateMachineMovesOnlyAlongItsEdges) {
  const TempDir tmp;
  JobStore s(tmp.file("jobs.db"));
  const int64_t u = s.create_user("u", false).first.id;
  const int64_t id = s.submit(u, "j", json::object(), 1, 0, 1).id;
  EXPECT_THROW(s.transition(id, {JobState::queued}, JobState::succeeded, 2), Error);
  EXPECT_FALSE(s.transition(id, {JobState::running}, JobState::succeeded, 2))
      << "not running: nothing moves";
  EXPECT_TRUE(s.start(id, {{7, 1}}, 3));
  EXPECT_FALSE(s.start(id, {{7, 1}}, 3)) << "started already";
  EXPECT_TRUE(s.transition(id, {JobState::starting}, JobState::running, 4));
  EXPECT_TRUE(s.transition(id, {JobState::running}, JobState::failed, 5, "rank 1 died", 137));
  const JobRecord j = *s.job(id);
  EXPECT_EQ(j.state, JobState::failed);
  EXPECT_EQ(j.message, "rank 1 died");
  EXPECT_EQ(j.exit_code, 137);
  EXPECT_EQ(j.finished, 5);
  ASSERT_EQ(j.placement.size(), 1u);
  EXPECT_EQ(j.placement[0].worker, 7);
  EXPECT_THROW(s.transition(id, {JobState::failed}, JobState::running, 6), Error)
      << "a final state is final";
}

TEST(JobStore, OfTwoThreadsMovingTheSameJobOneWins) {
  const TempDir tmp;
  JobStore s(tmp.file("jobs.db"));
  const int64_t u = s.create_user("u", false).first.id;
  for (int round = 0; round < 20; ++round) {
    const int64_t id = s.submit(u, "j", json::object(), 1, 0, 1).id;
    std::atomic<int> wins{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        if (t % 2 == 0 ? s.start(id, {{1, 1}}, 2)
                       : s.transition(id, {JobState::queued}, JobState::cancelled, 2))
          ++wins;
      });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(wins.load(), 1) << "round " << round;
  }
}

TEST(JobStore, ATokenFindsItsUserAndIsNeverStored) {
  const TempDir tmp;
  const std::string db = tmp.file("jobs.db");
  std::string token;
  {
    JobStore s(db);
    const auto admin = s.bootstrap_admin();
    ASSERT_TRUE(admin);
    EXPECT_TRUE(admin->first.admin);
    EXPECT_FALSE(s.bootstrap_admin()) << "only while there is no user";
    token = s.create_user("bob", false).second;
    const std::optional<User> bob = s.user_for_token(token);
    ASSERT_TRUE(bob);
    EXPECT_EQ(bob->name, "bob");
    std::string wrong = token;
    wrong.back() = wrong.back() == 'a' ? 'b' : 'a';
    EXPECT_FALSE(s.user_for_token(wrong));
    EXPECT_FALSE(s.user_for_token(""));
    EXPECT_FALSE(s.user_for_token(token_hash(token))) << "the hash is not a token";
  }
  EXPECT_EQ(token.rfind("braid_", 0), 0u);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string bytes = file_bytes(db + suffix);
    EXPECT_EQ(bytes.find(token.substr(6)), std::string::npos) << db << suffix;
  }
  EXPECT_NE(file_bytes(db).find(token_hash(token)), std::string::npos)
      << "the hash is what is kept";
}

TEST(Auth, BearerHeaders) {
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("bearer  abc "), "abc");
  EXPECT_FALSE(bearer_token("Basic abc"));
  EXPECT_FALSE(bearer_token("Bearer "));
  EXPECT_FALSE(bearer_token("Bearer a b"));
  EXPECT_FALSE(bearer_token(""));
}

TEST(JobStore, EventsFromManyThreadsAreEachKeptOnceInOrder) {
  const TempDir tmp;
  JobStore s(tmp.file("jobs.db"));
  const int64_t u = s.create_user("u", false).first.id;
  std::vector<int64_t> jobs;
  for (int j = 0; j < 4; ++j) jobs.push_back(s.submit(u, "j", json::object(), 4, 0, 1).id);
  std::vector<std::thread> threads;
  for (int j = 0; j < 4; ++j)
    for (int rank = 0; rank < 4; ++rank)
      threads.emplace_back([&, j, rank] {
        for (int batch = 0; batch < 10; ++batch) {
          std::vector<json> records;
          for (int k = 0; k < 5; ++k) records.push_back({{"step", batch * 5 + k}});
          s.append_events(jobs[static_cast<size_t>(j)], rank, records);
        }
      });
  for (std::thread& t : threads) t.join();
  for (const int64_t job : jobs) {
    EXPECT_EQ(s.event_count(job), 200);
    const std::vector<EventRecord> events = s.events_since(job, 0, 1000);
    ASSERT_EQ(events.size(), 200u);
    std::set<std::pair<int, int>> seen;
    for (size_t i = 0; i < events.size(); ++i) {
      EXPECT_EQ(events[i].seq, static_cast<int64_t>(i + 1));
      seen.insert({events[i].rank, events[i].record.at("step").get<int>()});
    }
    EXPECT_EQ(seen.size(), 200u) << "every (rank, step) once";
    EXPECT_EQ(s.events_since(job, 150, 1000).size(), 50u);
    EXPECT_EQ(s.events_since(job, 0, 7).size(), 7u);
  }
}

// A child process submits jobs and appends their events, reporting each committed job on a
// pipe, until it is killed with SIGKILL at a moment that varies; the database it leaves has
// every job it reported, with every event, and passes SQLite's integrity check.
TEST(JobStore, EveryCommittedJobSurvivesAKillNine) {
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const TempDir tmp;
    const std::string db = tmp.file("jobs.db");
    int64_t user = 0;
    {
      JobStore s(db);
      user = s.create_user("u", false).first.id;
    }
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(fds[0]);
      JobStore s(db);
      for (int i = 0;; ++i) {
        const int64_t id = s.submit(user, "j", json{{"i", i}}, 1, 0, i).id;
        s.append_events(id, 0, std::vector<json>(8, json{{"event", "train"}}));
        if (write(fds[1], &id, sizeof id) != sizeof id) _exit(1);
      }
    }
    close(fds[1]);
    // The kill lands a varying time after the child's first commit (however slowly a loaded
    // machine starts it), so some rounds kill it mid-transaction.
    std::vector<int64_t> reported;
    int64_t first = 0;
    ASSERT_EQ(read(fds[0], &first, sizeof first), static_cast<ssize_t>(sizeof first));
    reported.push_back(first);
    usleep(static_cast<useconds_t>(5000 + 15000 * round));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    for (int64_t id = 0; read(fds[0], &id, sizeof id) == sizeof id;) reported.push_back(id);
    close(fds[0]);
    ASSERT_FALSE(reported.empty()) << "the child committed nothing before the kill";
    JobStore s(db);
    for (const int64_t id : reported) {
      ASSERT_TRUE(s.job(id)) << "job " << id << " was committed and is gone";
      EXPECT_EQ(s.event_count(id), 8) << "job " << id;
    }
    Database check(db);
    Statement integrity = check.prepare("PRAGMA integrity_check");
    ASSERT_TRUE(integrity.step());
    EXPECT_EQ(integrity.text(0), "ok");
  }
}

TEST(JobStore, AFileThatIsNoDatabaseIsAnErrorNamingIt) {
  const TempDir tmp;
  const std::string path = tmp.file("garbage.db");
  std::ofstream(path, std::ios::binary) << std::string(4096, '\x5a');
  try {
    JobStore s(path);
    FAIL() << "opened a file of random bytes";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("move it aside"), std::string::npos) << e.what();
  }
}

// A database cut short (a copy interrupted, a full disk) is refused at open, named.
TEST(JobStore, ATruncatedDatabaseIsRefusedNamingIt) {
  const TempDir tmp;
  const std::string path = tmp.file("jobs.db");
  {
    JobStore s(path);
    const int64_t u = s.create_user("u", false).first.id;
    for (int i = 0; i < 200; ++i)
      s.append_events(s.submit(u, "j", json{{"pad", std::string(500, 'x')}}, 1, 0, i).id, 0,
                      std::vector<json>(4, json{{"event", "train"}}));
    Database(path).exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  try {
    JobStore s(path);
    FAIL() << "opened a database cut in half";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(JobStore, ANewerSchemaIsRefusedNamingBothVersions) {
  const TempDir tmp;
  const std::string path = tmp.file("jobs.db");
  { Database(path).exec("PRAGMA user_version = 7"); }
  try {
    JobStore s(path);
    FAIL() << "opened a newer schema";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 7, newer than this braid's " +
                                         std::to_string(JobStore::kSchemaVersion)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace braid::serve
