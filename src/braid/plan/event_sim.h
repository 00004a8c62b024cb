// A discrete-event run of a static task graph: tasks on resources (a rank's compute, a
// link's direction, a communication stream), each with a duration and the tasks it waits
// for. A resource runs its tasks one at a time in the order they were added (a rank runs
// its schedule in order; a stream its collectives in the order issued), so a task starts
// when its resource's previous task and every task it waits for have ended. Tasks are
// processed in order of readiness (a topological order of waits and resource order); a
// wait on a task added later on the same resource, or any cycle, is a deadlock and an
// error naming the tasks left.
#pragma once

#include <string>
#include <vector>

namespace braid::plan {

class TaskGraph {
 public:
  using Id = int;

  int add_resource(std::string name);
  // A task of `seconds` on `resource`, after `waits` (ids of tasks added before or after).
  Id add(int resource, double seconds, std::vector<Id> waits = {}, std::string label = {});
  void wait(Id task, Id on);  // one more wait, added after the task

  // Computes every task's start and end; the graph's start is 0.
  void run();
  double start(Id t) const { return tasks_[t].start; }
  double end(Id t) const { return tasks_[t].end; }
  double makespan() const { return makespan_; }
  // Sum of the durations of the resource's tasks (its busy time).
  double busy(int resource) const;
  size_t size() const { return tasks_.size(); }

 private:
  struct Task {
    int resource = 0;
    double seconds = 0;
    std::vector<Id> waits;
    std::string label;
    double start = 0, end = 0;
  };
  std::vector<std::string> resources_;
  std::vector<std::vector<Id>> queues_;  // per resource, in order added
  std::vector<Task> tasks_;
  double makespan_ = 0;
};

}  // namespace braid::plan
