// MeshStrategy's per-stage records (mesh_strategy.h), shared by its two source files.
#pragma once

#include <memory>
#include <vector>

#include "comm/progress_engine.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "parallel/mesh_strategy.h"

namespace braid::parallel {

struct MeshStrategy::Slot {
  std::vector<std::unique_ptr<nn::Cache>> caches;  // the stage's units' (none with recompute)
  Tensor input;                     // a stage after the first: the received activation
  Tensor output;                    // recompute: the stage's output, kept for its send
  const Tensor* x = nullptr;        // the micro-batch's input to this stage
  std::vector<comm::Handle> sends;  // sends still reading the slot's memory
};

// A parameter declared by one stage's unit (owner) and read by a later stage's (user).
struct MeshStrategy::Tie {
  nn::ParamSet::Id id = 0;
  size_t owner_unit = 0;
  int owner = 0, user = 0;
  Tensor staging;           // the owner's: the user's gradient as it arrives
  comm::Handle value_recv;  // the user's: this step's values from the owner
  bool value_pending = false;
  std::vector<comm::Handle> grad_sends;  // the user's: gradients still on the wire
};

}  // namespace braid::parallel
