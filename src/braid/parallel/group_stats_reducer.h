// GroupStatsReducer: SyncBatchNorm's statistics (nn/stats_reducer.h) reduced over the
// ranks of a comm::Group with braid's collectives, in f64. Every collective leaves
// bitwise-identical results on every rank, which is the reducer's contract.
//
// The group must be driven by no other thread while a layer calls the reducer (Group is
// single-threaded): in DDP, whose gradient allreduces run during backward, give it a
// group of its own, e.g. data_group.split(0, data_group.rank()) (a new channel over the
// same ranks), made on every rank in the same order as the other collectives.
//
// Lifetime: holds the group (shared). Thread safety: as the group's.
#pragma once

#include <memory>

#include "comm/collectives.h"
#include "comm/group.h"
#include "nn/stats_reducer.h"

namespace braid::parallel {

class GroupStatsReducer : public nn::StatsReducer {
 public:
  explicit GroupStatsReducer(std::shared_ptr<comm::Group> group,
                             comm::CollectiveOptions options = {});

  int size() const override;
  void allgather(const double* send, double* recv, size_t count) override;
  void sum(double* data, size_t count) override;

  comm::Group& group() const { return *group_; }

 private:
  std::shared_ptr<comm::Group> group_;
  comm::CollectiveOptions options_;
};

}  // namespace braid::parallel
