// PsRestarts: the restart log followed per rank, the transport's rejoin, and done marks.
#include "parallel/ps_restarts.h"

#include <thread>

#include "comm/transport.h"
#include "comm/transport_factory.h"
#include "core/error.h"

namespace braid::parallel {

PsRestarts::PsRestarts(std::shared_ptr<comm::Store> job_store,
                       std::shared_ptr<comm::Store> transport_store, int world_size)
    : job_store_(job_store),
      transport_store_(std::move(transport_store)),
      log_(std::move(job_store)),
      incarnations_(static_cast<size_t>(world_size), 0),
      stays_gone_(static_cast<size_t>(world_size), false) {
  poll();  // what happened before this process started is no news to it
}

void PsRestarts::follow(const comm::RankRestart& e) {
  if (e.rank < 0 || e.rank >= static_cast<int>(incarnations_.size())) return;
  const auto r = static_cast<size_t>(e.rank);
  if (e.restarted) incarnations_[r] = std::max(incarnations_[r], e.incarnation + 1);
  stays_gone_[r] = !e.restarted && e.incarnation == incarnations_[r];
}

void PsRestarts::read() {
  for (const comm::RankRestart& e : log_.poll()) follow(e);
}

std::vector<comm::RankRestart> PsRestarts::poll() {
  read();
  const std::vector<comm::RankRestart>& all = log_.entries();
  std::vector<comm::RankRestart> fresh(all.begin() + static_cast<ptrdiff_t>(delivered_), all.end());
  delivered_ = all.size();
  return fresh;
}

std::optional<comm::RankRestart> PsRestarts::await_decision(int rank, int incarnation,
                                                            comm::Deadline deadline) {
  const size_t known = log_.entries().size();
  const std::optional<comm::RankRestart> e = log_.await(rank, incarnation, deadline);
  const std::vector<comm::RankRestart>& all = log_.entries();
  for (size_t i = known; i < all.size(); ++i) follow(all[i]);
  return e;
}

bool PsRestarts::stays_gone(int rank) const { return stays_gone_.at(static_cast<size_t>(rank)); }

bool PsRestarts::published(int rank) {
  return comm::rejoin_published(*comm::rejoin_store(transport_store_, rank, incarnation(rank)));
}

void PsRestarts::connect(comm::Group& world, int rank, comm::Deadline deadline) {
  BRAID_CHECK(incarnation(rank) > 0, "ps restarts: rank ", rank,
              " was never restarted; there is no new process to connect to");
  const std::shared_ptr<comm::Store> store =
      comm::rejoin_store(transport_store_, rank, incarnation(rank));
  // The new process must start, load its model and publish itself first; if it fails
  // meanwhile, the launcher's word on it ends the wait.
  const int waiting_for = incarnation(rank);
  while (!comm::rejoin_published(*store)) {
    if (deadline.expired())
      BRAID_THROW(TimeoutError, "restarted rank ", rank, " (restart ", waiting_for,
                  ") did not publish its transport within ", deadline.waited_seconds(), " s");
    read();
    for (const comm::RankRestart& e : log_.entries())
      if (e.rank == rank && e.incarnation == waiting_for)
        BRAID_THROW(comm::PeerError, "restarted rank ", rank, " (restart ", waiting_for,
                    ") failed too before it connected (its own error is in its output)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  world.transport().accept_rejoin(rank, *store, deadline);
}

void PsRestarts::mark_done(int worker) { job_store_->add("ps/done/" + std::to_string(worker), 1); }

bool PsRestarts::done(int worker) {
  return job_store_->add("ps/done/" + std::to_string(worker), 0) > 0;
}

}  // namespace braid::parallel
