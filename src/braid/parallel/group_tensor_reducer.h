// GroupTensorReducer: tensor parallelism's sums and maxima (nn/tensor_reducer.h) over the
// ranks of a comm::Group, by braid's collectives: the layers wait for each sum before they
// go on, so there is nothing to overlap. On the caller's (compute) thread, or, once a
// comm::ProgressEngine drives the transport (use_engine), as operations of that engine.
// Every collective leaves bitwise identical results on every rank (the reducer's contract).
// Counts the seconds spent in its calls (the step's exposed communication).
#pragma once

#include <memory>

#include "core/reduce.h"
#include "nn/tensor_reducer.h"

namespace braid::comm {
class Group;
class ProgressEngine;
}  // namespace braid::comm

namespace braid::parallel {

class GroupTensorReducer : public nn::TensorReducer {
 public:
  explicit GroupTensorReducer(std::shared_ptr<comm::Group> group);
  // From now on, reduce as operations of `engine` (which must outlive the later calls).
  void use_engine(comm::ProgressEngine* engine) { engine_ = engine; }

  int rank() const override;
  int size() const override;
  void sum(float* data, size_t count) override;
  void max(float* data, size_t count) override;

  double seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }
  comm::Group& group() { return *group_; }

 private:
  void reduce(float* data, size_t count, ReduceOp op);

  std::shared_ptr<comm::Group> group_;
  comm::ProgressEngine* engine_ = nullptr;
  double seconds_ = 0;
};

}  // namespace braid::parallel
