// The job server's placement rule: which queued jobs start now, and where. Pure (a queue and
// the workers' free slots in, placements out), so the server calls it under its lock on each
// heartbeat and tests check it without a network.
//
// Gang scheduling: a job starts only when all its ranks have a slot, and never partly. The
// queue is served in order of priority (higher first), then submission (older first), and
// strictly: a job that does not fit now holds back the ones behind it, so a large job is not
// starved by a stream of small ones (no backfilling). A job goes on one worker when one has
// the slots (its ranks then talk through shared memory), else on the fewest workers, those
// with the most free slots first, unless it must run on one (a parameter-server job: its
// launcher starts every role on one host), when it waits for one. Only live workers count.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::serve {

struct QueuedJob {
  int64_t id = 0;
  int ranks = 1;
  int priority = 0;
  double submitted = 0;   // seconds since the epoch: the tie-break
  bool one_host = false;  // all its ranks on one worker, or it waits
};

struct WorkerSlots {
  int64_t id = 0;
  int free_slots = 0;
};

struct HostShare {
  int64_t worker = 0;
  int ranks = 0;
};

struct JobPlacement {
  int64_t job = 0;
  std::vector<HostShare> hosts;  // node rank = index; ranks numbered host by host
};

// The jobs of `queue` to start now, in the order they were chosen. `workers` are the live
// ones; their free slots are what is left after the jobs already running.
std::vector<JobPlacement> place_jobs(std::vector<QueuedJob> queue,
                                     std::vector<WorkerSlots> workers);

}  // namespace braid::serve
