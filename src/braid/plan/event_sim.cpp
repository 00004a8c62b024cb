#include "plan/event_sim.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace braid::plan {

int TaskGraph::add_resource(std::string name) {
  resources_.push_back(std::move(name));
  queues_.emplace_back();
  return static_cast<int>(resources_.size()) - 1;
}

TaskGraph::Id TaskGraph::add(int resource, double seconds, std::vector<Id> waits,
                             std::string label) {
  BRAID_CHECK(resource >= 0 && resource < static_cast<int>(resources_.size()),
              "task graph: no resource ", resource);
  BRAID_CHECK(seconds >= 0, "task graph: task '", label, "' lasts ", seconds, " s");
  const Id id = static_cast<Id>(tasks_.size());
  tasks_.push_back({resource, seconds, std::move(waits), std::move(label)});
  queues_[resource].push_back(id);
  return id;
}

void TaskGraph::wait(Id task, Id on) { tasks_.at(task).waits.push_back(on); }

void TaskGraph::run() {
  const size_t n = tasks_.size();
  // Each task's successors: the tasks that wait on it, and the next task of its resource.
  std::vector<std::vector<Id>> next(n);
  std::vector<int> pending(n, 0);
  for (Id t = 0; t < static_cast<Id>(n); ++t) {
    for (Id w : tasks_[t].waits) {
      BRAID_CHECK(w >= 0 && w < static_cast<Id>(n), "task graph: '", tasks_[t].label,
                  "' waits on no task ", w);
      next[w].push_back(t);
      ++pending[t];
    }
  }
  for (const auto& q : queues_) {
    for (size_t i = 1; i < q.size(); ++i) {
      next[q[i - 1]].push_back(q[i]);
      ++pending[q[i]];
    }
  }
  std::vector<Id> ready;
  for (Id t = 0; t < static_cast<Id>(n); ++t)
    if (pending[t] == 0) ready.push_back(t);
  std::vector<double> earliest(n, 0.0);  // the latest end of what it waited for so far
  size_t done = 0;
  makespan_ = 0;
  while (!ready.empty()) {
    const Id t = ready.back();
    ready.pop_back();
    Task& task = tasks_[t];
    task.start = earliest[t];
    task.end = task.start + task.seconds;
    makespan_ = std::max(makespan_, task.end);
    ++done;
    for (Id s : next[t]) {
      earliest[s] = std::max(earliest[s], task.end);
      if (--pending[s] == 0) ready.push_back(s);
    }
  }
  if (done == n) return;
  std::string stuck;
  for (Id t = 0; t < static_cast<Id>(n) && stuck.size() < 200; ++t)
    if (pending[t] > 0) stuck += (stuck.empty() ? "" : ", ") + tasks_[t].label;
  BRAID_THROW(Error, "task graph: deadlock, ", n - done, " tasks never ready (", stuck,
              "): a task waits on one its resource runs after it");
}

double TaskGraph::busy(int resource) const {
  double sum = 0;
  for (Id t : queues_.at(resource)) sum += tasks_[t].seconds;
  return sum;
}

}  // namespace braid::plan
