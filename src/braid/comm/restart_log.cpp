// RestartLog: the launcher's decisions about dead ranks, as numbered store keys.
#include "comm/restart_log.h"

#include <sstream>
#include <thread>

#include "core/error.h"

namespace braid::comm {
namespace {

constexpr const char* kCountKey = "restarts/count";
// How long await() sleeps between looks at the log when nothing new came.
constexpr std::chrono::milliseconds kAwaitPoll{20};

std::string entry_key(int64_t n) { return "restarts/" + std::to_string(n); }

}  // namespace

RestartLog::RestartLog(std::shared_ptr<Store> job_store) : store_(std::move(job_store)) {
  BRAID_CHECK(store_ != nullptr, "RestartLog: needs the job's store");
}

void RestartLog::record(const RankRestart& e) {
  // One writer (the launcher): the entry first, then the count that makes it visible, so a
  // reader never waits for an entry it was told of.
  const int64_t n = store_->add(kCountKey, 0) + 1;
  std::ostringstream text;
  text << e.rank << ' ' << e.incarnation << ' ' << (e.restarted ? "restart" : "none");
  store_->set(entry_key(n), text.str());
  store_->add(kCountKey, 1);
}

std::vector<RankRestart> RestartLog::poll() {
  const int64_t count = store_->add(kCountKey, 0);
  std::vector<RankRestart> fresh;
  for (auto n = static_cast<int64_t>(entries_.size()) + 1; n <= count; ++n) {
    const std::string text =
        store_->get_string(entry_key(n), Deadline::after(std::chrono::seconds(10)));
    std::istringstream in(text);
    RankRestart e;
    std::string what;
    in >> e.rank >> e.incarnation >> what;
    BRAID_CHECK(!in.fail() && (what == "restart" || what == "none"), "restart log entry ", n,
                " is malformed: '", text, "'");
    e.restarted = what == "restart";
    entries_.push_back(e);
    fresh.push_back(e);
  }
  return fresh;
}

std::optional<RankRestart> RestartLog::await(int rank, int incarnation, Deadline deadline) {
  for (;;) {
    poll();
    for (const RankRestart& e : entries_)
      if (e.rank == rank && e.incarnation == incarnation) return e;
    if (deadline.expired()) return std::nullopt;
    std::this_thread::sleep_for(kAwaitPoll);
  }
}

}  // namespace braid::comm
