#include "serve/sqlite_db.h"

#include <sqlite3.h>

#include "core/error.h"

namespace braid::serve {
namespace {

[[noreturn]] void fail(sqlite3* db, const std::string& path, std::string_view what) {
  const int code = db != nullptr ? sqlite3_extended_errcode(db) : SQLITE_ERROR;
  const std::string message = db != nullptr ? sqlite3_errmsg(db) : "cannot open";
  if ((code & 0xff) == SQLITE_NOTADB || (code & 0xff) == SQLITE_CORRUPT)
    BRAID_THROW(IoError, "job database '", path, "': ", message, " (while ", what,
                "); it is not a braid serve database or is damaged: move it aside and start "
                "braid serve again (a new empty database is made), or restore a copy");
  BRAID_THROW(IoError, "job database '", path, "': ", message, " (while ", what, ")");
}

}  // namespace

Statement::Statement(sqlite3* db, std::string_view sql, const std::string& path)
    : db_(db), path_(path) {
  if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) !=
      SQLITE_OK)
    fail(db, path, "preparing a statement");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int i, int64_t v) {
  if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) fail(db_, path_, "binding a parameter");
  return *this;
}

Statement& Statement::bind(int i, double v) {
  if (sqlite3_bind_double(stmt_, i, v) != SQLITE_OK) fail(db_, path_, "binding a parameter");
  return *this;
}

Statement& Statement::bind(int i, std::string_view v) {
  // An empty view may have no data pointer, which SQLite would bind as NULL, not ''.
  if (sqlite3_bind_text(stmt_, i, v.empty() ? "" : v.data(), static_cast<int>(v.size()),
                        SQLITE_TRANSIENT) != SQLITE_OK)
    fail(db_, path_, "binding a parameter");
  return *this;
}

Statement& Statement::bind_null(int i) {
  if (sqlite3_bind_null(stmt_, i) != SQLITE_OK) fail(db_, path_, "binding a parameter");
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_, path_, "running a statement");
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Statement::integer(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::real(int column) const { return sqlite3_column_double(stmt_, column); }
bool Statement::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::string Statement::text(int column) const {
  const auto* p = sqlite3_column_text(stmt_, column);
  return p == nullptr ? std::string()
                      : std::string(reinterpret_cast<const char*>(p),
                                    static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

Database::Database(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    const std::string message = db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    BRAID_THROW(IoError, "job database '", path, "': cannot open: ", message,
                "; check that its folder exists and is writable");
  }
  sqlite3_busy_timeout(db_, 5000);  // another connection's write: wait, do not fail
  try {
    // The first read of the file: a file that is not a database fails here, named.
    exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Database::~Database() {
  cache_.clear();  // a connection with statements left open would not close
  sqlite3_close(db_);
}

Database::Cached Database::cached(const std::string& sql) {
  std::unique_ptr<Statement>& s = cache_[sql];
  if (!s) s = std::make_unique<Statement>(db_, sql, path_);
  return Cached(*s);
}

void Database::exec(std::string_view sql) {
  const std::string text(sql);
  char* message = nullptr;
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    sqlite3_free(message);
    fail(db_, path_, "running SQL");
  }
}

int64_t Database::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }
int Database::changes() const { return sqlite3_changes(db_); }

Database::Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Database::Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Database::Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace braid::serve
