// PsRestartPolicy: the restart budget and its log in the store.
#include "launch/ps_restart_policy.h"

#include "comm/socket.h"
#include "comm/tcp_store.h"
#include "core/error.h"

namespace braid::launch {

PsRestartPolicy::PsRestartPolicy(int max_restarts, const std::string& store_address,
                                 const comm::Secret& secret, const std::string& job_id)
    : max_(max_restarts) {
  const comm::HostPort at = comm::parse_host_port(store_address);
  auto client = comm::connect_store(at.host, at.port, secret,
                                    comm::Deadline::after(std::chrono::seconds(10)));
  log_ = std::make_unique<comm::RestartLog>(comm::prefixed(std::move(client), "job/" + job_id));
}

bool PsRestartPolicy::decide(int rank, int incarnation, bool by_signal) {
  const bool restart = by_signal && used_ < max_;
  error_.clear();
  try {
    log_->record({.rank = rank, .incarnation = incarnation, .restarted = restart});
  } catch (const std::exception& e) {
    error_ = e.what();
    return false;
  }
  if (restart) ++used_;
  return restart;
}

}  // namespace braid::launch
