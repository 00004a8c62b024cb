#include "parallel/group_tensor_reducer.h"

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/error.h"
#include "core/timer.h"

namespace braid::parallel {

GroupTensorReducer::GroupTensorReducer(std::shared_ptr<comm::Group> group)
    : group_(std::move(group)) {
  BRAID_CHECK(group_, "GroupTensorReducer: needs a group");
}

int GroupTensorReducer::rank() const { return group_->rank(); }
int GroupTensorReducer::size() const { return group_->size(); }

void GroupTensorReducer::sum(float* data, size_t count) {
  if (group_->size() == 1) return;
  Stopwatch w;
  comm::allreduce(*group_, data, count, DType::f32, ReduceOp::sum);
  seconds_ += w.elapsed();
}

void GroupTensorReducer::max(float* data, size_t count) {
  if (group_->size() == 1) return;
  Stopwatch w;
  comm::allreduce(*group_, data, count, DType::f32, ReduceOp::max);
  seconds_ += w.elapsed();
}

}  // namespace braid::parallel
