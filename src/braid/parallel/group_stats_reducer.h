// GroupStatsReducer: SyncBatchNorm's statistics (nn/stats_reducer.h) reduced over the
// ranks of a comm::Group with braid's collectives, in f64. Every collective leaves
// bitwise-identical results on every rank, which is the reducer's contract.
//
// Who drives the group: by default the caller's (compute) thread, with blocking calls.
// Once a comm::ProgressEngine owns the group's transport (DDP, whose bucket allreduces
// overlap backward), only the engine's thread may call collectives on it: use_engine()
// then makes each reduction an operation of the engine, submitted and waited for. It
// queues behind the buckets submitted before it, in the same order on every rank (a
// BatchNorm's backward runs at the same point of every rank's backward), so ranks agree.
//
// Lifetime: holds the group (shared); an engine given to use_engine() must outlive every
// later call (call use_engine(nullptr) before destroying it). Thread safety: one thread
// at a time, as the layers calling it.
#pragma once

#include <memory>

#include "comm/collectives.h"
#include "comm/group.h"
#include "nn/stats_reducer.h"

namespace braid::comm {
class ProgressEngine;
}

namespace braid::parallel {

class GroupStatsReducer : public nn::StatsReducer {
 public:
  explicit GroupStatsReducer(std::shared_ptr<comm::Group> group,
                             comm::CollectiveOptions options = {});

  // From now on, run the reductions as operations of `engine`, which must drive this
  // reducer's group; null: blocking calls on the caller's thread again.
  void use_engine(comm::ProgressEngine* engine) { engine_ = engine; }

  int size() const override;
  void allgather(const double* send, double* recv, size_t count) override;
  void sum(double* data, size_t count) override;

 private:
  std::shared_ptr<comm::Group> group_;
  comm::CollectiveOptions options_;
  comm::ProgressEngine* engine_ = nullptr;
};

}  // namespace braid::parallel
