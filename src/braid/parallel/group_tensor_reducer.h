// GroupTensorReducer: tensor parallelism's sums and maxima (nn/tensor_reducer.h) over the
// ranks of a comm::Group, by braid's collectives on the caller's (compute) thread: the
// layers wait for each sum before they go on, so there is nothing to overlap. Every
// collective leaves bitwise identical results on every rank (the reducer's contract).
// Counts the seconds spent in its calls (the step's exposed communication).
#pragma once

#include <memory>

#include "nn/tensor_reducer.h"

namespace braid::comm {
class Group;
}

namespace braid::parallel {

class GroupTensorReducer : public nn::TensorReducer {
 public:
  explicit GroupTensorReducer(std::shared_ptr<comm::Group> group);

  int rank() const override;
  int size() const override;
  void sum(float* data, size_t count) override;
  void max(float* data, size_t count) override;

  double seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }
  comm::Group& group() { return *group_; }

 private:
  std::shared_ptr<comm::Group> group_;
  double seconds_ = 0;
};

}  // namespace braid::parallel
