#include "launch/agent_heartbeat.h"

#include <sstream>

#include "core/error.h"

namespace braid::launch {

AgentHeartbeat::AgentHeartbeat(std::function<std::shared_ptr<comm::Store>()> connect, int node,
                               std::chrono::milliseconds every)
    : connect_(std::move(connect)),
      node_(node),
      every_(every),
      answered_(AgentClock::now()),
      thread_([this] { loop(); }) {}

AgentHeartbeat::~AgentHeartbeat() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void AgentHeartbeat::set_members(std::vector<std::string> live, std::vector<std::string> gone) {
  {
    std::lock_guard lock(mutex_);
    if (gone.size() > report_.gone.size()) urgent_ = true;
    report_.live = std::move(live);
    report_.gone = std::move(gone);
  }
  wake_.notify_all();
}

bool AgentHeartbeat::finish(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  finishing_ = true;
  urgent_ = true;
  wake_.notify_all();
  const bool done = wake_.wait_for(lock, limit, [this] { return finished_; });
  stopping_ = true;
  wake_.notify_all();
  return done;
}

std::vector<std::string> AgentHeartbeat::take_kill_orders() {
  std::lock_guard lock(mutex_);
  return std::exchange(kills_, {});
}

std::string AgentHeartbeat::lost_reason() const {
  std::lock_guard lock(mutex_);
  return lost_reason_;
}

AgentClock::duration AgentHeartbeat::unreachable_for(AgentClock::time_point now) const {
  std::lock_guard lock(mutex_);
  return now - answered_;
}

std::string AgentHeartbeat::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

void AgentHeartbeat::beat_once(const AgentReport& report) {
  if (!store_) store_ = connect_();
  store_->set(agent_report_key(node_), format_agent_report(report));
  const std::string orders = comm::read_now(*store_, agent_orders_key(node_));
  std::lock_guard lock(mutex_);
  answered_ = AgentClock::now();
  last_error_.clear();
  if (report.done) finished_ = true;
  std::istringstream in(orders);
  size_t index = 0;
  for (std::string line; std::getline(in, line); ++index) {
    if (index < orders_seen_) continue;
    if (line.rfind("kill ", 0) == 0) kills_.push_back(line.substr(5));
    if (line.rfind("lost ", 0) == 0 && lost_reason_.empty()) lost_reason_ = line.substr(5);
  }
  orders_seen_ = std::max(orders_seen_, index);
}

void AgentHeartbeat::loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    ++report_.beat;
    report_.done = finishing_;
    const AgentReport report = report_;
    urgent_ = false;
    lock.unlock();
    try {
      beat_once(report);
    } catch (const std::exception& e) {
      // Unreachable for now (a cut link times out, a gone server refuses): a fresh
      // connection next time. Waiting for the next beat keeps a refusing server from
      // being hammered.
      store_.reset();
      lock.lock();
      last_error_ = e.what();
      lock.unlock();
    }
    lock.lock();
    if (finished_) wake_.notify_all();  // finish() waits for it
    wake_.wait_for(lock, every_, [this] { return stopping_ || urgent_; });
  }
}

}  // namespace braid::launch
