// The heartbeat of an agent that does not host the job's store (`braid launch --nnodes`,
// launch/agent_liveness.h says what the coordinator makes of it). A thread of its own
// rewrites the agent's report every `every` (and at once when a member died), reads the
// coordinator's orders for this agent, and records when the store last answered, so the
// agent's supervision loop never blocks on the network: it asks unreachable_for() and gives
// up on the job when the store stays silent past its limit (its link is cut, or the agent
// hosting the store is gone).
//
// Every store call is bounded by `call_timeout`; a failed call drops the connection, and
// the next beat connects afresh (a link that comes back is used again).
//
// Thread safety: every method may be called from any thread. Lifetime: the destructor stops
// the thread, within one store call's timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "launch/agent_liveness.h"

namespace braid::launch {

class AgentHeartbeat {
 public:
  // `connect` opens the job's store (under the job's key prefix), bounded by its own
  // deadline; it is called again after any failed call.
  AgentHeartbeat(std::function<std::shared_ptr<comm::Store>()> connect, int node,
                 std::chrono::milliseconds every);
  ~AgentHeartbeat();
  AgentHeartbeat(const AgentHeartbeat&) = delete;
  AgentHeartbeat& operator=(const AgentHeartbeat&) = delete;

  // This agent's members now; a report goes out at once when `gone` grew.
  void set_members(std::vector<std::string> live, std::vector<std::string> gone);
  // A last report saying the agent is done (none of its members runs); waits up to `limit`
  // for it to reach the store, then stops the thread. True when it did.
  bool finish(std::chrono::milliseconds limit);

  // Members the coordinator ordered killed (left out of a round) since the last call.
  std::vector<std::string> take_kill_orders();
  // Nonempty once the coordinator counted this agent lost: why.
  std::string lost_reason() const;
  // How long the store has not answered (zero while it answers) and its last error.
  AgentClock::duration unreachable_for(AgentClock::time_point now) const;
  std::string last_error() const;

 private:
  void loop();
  // One report and one read of the orders; throws what the store throws.
  void beat_once(const AgentReport& report);

  const std::function<std::shared_ptr<comm::Store>()> connect_;
  const int node_;
  const std::chrono::milliseconds every_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_:
  AgentReport report_;
  bool urgent_ = false;     // a member died: report before the next beat is due
  bool stopping_ = false;   // the destructor or finish() asked the thread to end
  bool finishing_ = false;  // the next report says done
  bool finished_ = false;   // a done report reached the store
  size_t orders_seen_ = 0;  // lines of the orders already taken in
  std::vector<std::string> kills_;
  std::string lost_reason_;
  AgentClock::time_point answered_;  // the store's last answer (or the start)
  std::string last_error_;

  std::shared_ptr<comm::Store> store_;  // the thread's alone
  std::thread thread_;                  // last: starts once the rest is built
};

}  // namespace braid::launch
