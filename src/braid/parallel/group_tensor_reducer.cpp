#include "parallel/group_tensor_reducer.h"

#include "comm/collectives.h"
#include "comm/group.h"
#include "comm/progress_engine.h"
#include "core/error.h"
#include "core/timer.h"

namespace braid::parallel {

GroupTensorReducer::GroupTensorReducer(std::shared_ptr<comm::Group> group)
    : group_(std::move(group)) {
  BRAID_CHECK(group_, "GroupTensorReducer: needs a group");
}

int GroupTensorReducer::rank() const { return group_->rank(); }
int GroupTensorReducer::size() const { return group_->size(); }

void GroupTensorReducer::sum(float* data, size_t count) { reduce(data, count, ReduceOp::sum); }
void GroupTensorReducer::max(float* data, size_t count) { reduce(data, count, ReduceOp::max); }

void GroupTensorReducer::reduce(float* data, size_t count, ReduceOp op) {
  if (group_->size() == 1) return;
  Stopwatch w;
  if (engine_ == nullptr) {
    comm::allreduce(*group_, data, count, DType::f32, op);
  } else {
    comm::Group* g = group_.get();
    engine_
        ->submit("tensor-parallel reduction",
                 [g, data, count, op](comm::Group&) {
                   comm::allreduce(*g, data, count, DType::f32, op);
                 })
        .wait();
  }
  seconds_ += w.elapsed();
}

}  // namespace braid::parallel
