// A small RAII layer over SQLite's C API for the job store: one connection, statements
// prepared with bound parameters only (user data never becomes SQL text), and a transaction
// guard. Errors are braid::IoError naming the database file and SQLite's message.
//
// Opened in WAL mode: readers run beside the one writer, and a commit is one append to the
// log. synchronous=NORMAL: in WAL mode a commit is durable across a crash of the process
// (kill -9 included: the log is in the OS's page cache, which outlives the process); only
// a power loss or OS crash may lose the last commits, which the server's own restart
// recovery would not notice anyway. FULL would fsync every commit for that case alone.
//
// Not thread-safe: a connection belongs to one thread at a time (JobStore holds a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace braid::serve {

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql, const std::string& path);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are numbered from 1, as in SQL's "?".
  Statement& bind(int i, int64_t v);
  Statement& bind(int i, double v);
  Statement& bind(int i, std::string_view v);
  Statement& bind_null(int i);
  // Steps once: true while a row is there to read.
  bool step();
  // Runs to the end (an INSERT, UPDATE, DELETE).
  void run();
  // Ready to run again with new bindings.
  void reset();
  int64_t integer(int column) const;
  double real(int column) const;
  std::string text(int column) const;
  bool is_null(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  const std::string& path_;
};

class Database {
 public:
  // Opens (creating) `path`; an Error naming it when it is not a SQLite database.
  explicit Database(const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(std::string_view sql);  // statements without parameters (the schema)
  Statement prepare(std::string_view sql) { return Statement(db_, sql, path_); }
  // The hot paths' statements, parsed once per connection and kept: the handle resets its
  // statement when it goes, so a read never holds its snapshot past its use.
  class Cached {
   public:
    explicit Cached(Statement& s) : s_(s) {}
    ~Cached() { s_.reset(); }
    Cached(const Cached&) = delete;
    Cached& operator=(const Cached&) = delete;
    Statement& operator*() { return s_; }
    Statement* operator->() { return &s_; }

   private:
    Statement& s_;
  };
  Cached cached(const std::string& sql);
  int64_t last_insert_id() const;
  int changes() const;
  const std::string& path() const { return path_; }

  // BEGIN IMMEDIATE (the write lock now, not at the first write: no deadlock between two
  // writers that both read first); COMMIT in commit(), ROLLBACK when destroyed without.
  class Transaction {
   public:
    explicit Transaction(Database& db);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit();

   private:
    Database& db_;
    bool done_ = false;
  };

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;  // finalized before the close
};

}  // namespace braid::serve
