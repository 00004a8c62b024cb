// How the processes of a parameter-server job come back (`braid launch --servers S --workers
// W --max-restarts K`): what a worker, a server or a restarted process of the job asks of
// the store to find the others again.
//
// The launcher restarts a worker or server killed by a signal in its slot, as a new process
// (its incarnation: restarts of the slot before it), and logs each death with its decision
// (comm/restart_log.h). The new process publishes its transport (connect_rejoining_transport)
// and waits for its peers to connect: a server connects once it reads that a worker was
// restarted and sees it published; a worker connects to a restarted server when its own
// exchange with the dead one fails. So a restarted worker talks to the servers only (not to
// the other workers: the chief's stop decisions reach it through the servers, and the
// workers' own group is not needed outside the timeline's merge), and a restarted server to
// the workers that reach it.
//
// A worker whose run ended leaves a mark in the store (mark_done), so a server restarted
// after that worker said `done` to its predecessor still knows the worker finished.
//
// Thread safety: one thread (the rank's compute or serving thread).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "comm/group.h"
#include "comm/restart_log.h"
#include "comm/store.h"

namespace braid::parallel {

class PsRestarts {
 public:
  // `job_store`: the job's keys; `transport_store`: those of the world transport (where
  // restarted processes publish theirs). Reads the log so far: each rank's incarnation.
  PsRestarts(std::shared_ptr<comm::Store> job_store, std::shared_ptr<comm::Store> transport_store,
             int world_size);

  // The launcher's decisions since the last call (none from before this object was made);
  // incarnation() follows every entry read, whoever read it.
  std::vector<comm::RankRestart> poll();
  // Waits up to `deadline` for the launcher's decision on the death of `rank`'s process
  // `incarnation`; nullopt at the deadline.
  std::optional<comm::RankRestart> await_decision(int rank, int incarnation,
                                                  comm::Deadline deadline);
  // The latest process of transport rank `rank` the log knows of (restarts before it).
  int incarnation(int rank) const { return incarnations_.at(static_cast<size_t>(rank)); }
  // Whether `rank`'s last decision was to leave it gone (no restarts left).
  bool stays_gone(int rank) const;
  // Whether `rank`'s latest process has published its transport (connect would not wait).
  bool published(int rank);
  // Connects `world`'s transport to `rank`'s latest process (transport rank), waiting for it
  // to publish itself until `deadline`.
  void connect(comm::Group& world, int rank, comm::Deadline deadline);

  // A worker's run ended well (it told every server `done`).
  void mark_done(int worker);
  bool done(int worker);

 private:
  void follow(const comm::RankRestart& e);
  // Reads new entries into the log and follows them, leaving them news for poll().
  void read();

  std::shared_ptr<comm::Store> job_store_, transport_store_;
  comm::RestartLog log_;
  std::vector<int> incarnations_;
  std::vector<bool> stays_gone_;
  size_t delivered_ = 0;  // entries poll() returned so far
};

}  // namespace braid::parallel
