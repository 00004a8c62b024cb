#include "serve/gang_scheduler.h"

#include <algorithm>

namespace braid::serve {

std::vector<JobPlacement> place_jobs(std::vector<QueuedJob> queue,
                                     std::vector<WorkerSlots> workers) {
  std::stable_sort(queue.begin(), queue.end(), [](const QueuedJob& a, const QueuedJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.submitted != b.submitted) return a.submitted < b.submitted;
    return a.id < b.id;
  });
  std::vector<JobPlacement> out;
  for (const QueuedJob& job : queue) {
    int64_t free = 0;
    for (const WorkerSlots& w : workers) free += std::max(0, w.free_slots);
    if (job.ranks <= 0 || free < job.ranks) break;  // strict order: it waits, so do the rest
    JobPlacement p{.job = job.id, .hosts = {}};
    // One worker if one fits it: the smallest that does, so larger gaps stay for larger jobs.
    WorkerSlots* single = nullptr;
    for (WorkerSlots& w : workers)
      if (w.free_slots >= job.ranks && (single == nullptr || w.free_slots < single->free_slots))
        single = &w;
    if (single == nullptr && job.one_host) break;  // it waits for a worker with the room
    if (single != nullptr) {
      p.hosts.push_back({single->id, job.ranks});
      single->free_slots -= job.ranks;
    } else {
      std::vector<WorkerSlots*> order;
      for (WorkerSlots& w : workers)
        if (w.free_slots > 0) order.push_back(&w);
      std::stable_sort(order.begin(), order.end(), [](const WorkerSlots* a, const WorkerSlots* b) {
        return a->free_slots > b->free_slots;
      });
      int left = job.ranks;
      for (WorkerSlots* w : order) {
        const int take = std::min(left, w->free_slots);
        p.hosts.push_back({w->id, take});
        w->free_slots -= take;
        left -= take;
        if (left == 0) break;
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace braid::serve
