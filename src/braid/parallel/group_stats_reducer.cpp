// GroupStatsReducer (contract in group_stats_reducer.h).
#include "parallel/group_stats_reducer.h"

#include <utility>

#include "comm/progress_engine.h"
#include "core/error.h"

namespace braid::parallel {

GroupStatsReducer::GroupStatsReducer(std::shared_ptr<comm::Group> group,
                                     comm::CollectiveOptions options)
    : group_(std::move(group)), options_(options) {
  BRAID_CHECK(group_ != nullptr, "GroupStatsReducer: needs a group, got none");
}

int GroupStatsReducer::size() const { return group_->size(); }

void GroupStatsReducer::allgather(const double* send, double* recv, size_t count) {
  if (engine_) {
    engine_->iallgather(send, recv, count, DType::f64, "SyncBatchNorm statistics", options_).wait();
    return;
  }
  comm::allgather(*group_, send, recv, count, DType::f64, options_);
}

void GroupStatsReducer::sum(double* data, size_t count) {
  if (engine_) {
    engine_
        ->iallreduce(data, count, DType::f64, ReduceOp::sum, "SyncBatchNorm gradient sums",
                     options_)
        .wait();
    return;
  }
  comm::allreduce(*group_, data, count, DType::f64, ReduceOp::sum, options_);
}

}  // namespace braid::parallel
