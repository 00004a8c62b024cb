// MeshStrategy's per-stage records (mesh_strategy.h), shared by its two source files.
#pragma once

#include <memory>
#include <vector>

#include "comm/progress_engine.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "parallel/gradient_reducer.h"
#include "parallel/mesh_strategy.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {

struct MeshStrategy::Slot {
  std::vector<std::unique_ptr<nn::Cache>> caches;  // the chunk's units' (none with recompute)
  Tensor input;                     // a chunk after the first: the received activation
  Tensor output;                    // recompute: the chunk's output, kept for its send
  const Tensor* x = nullptr;        // the micro-batch's input to this chunk
  std::vector<comm::Handle> sends;  // sends still reading the slot's memory
};

// One contiguous run of units on this rank: the rank's stage, or one of its v chunks under
// the interleaved schedule (chunk c of the P v lives on rank c mod P).
struct MeshStrategy::Chunk {
  int index = 0;                        // among all chunks: the virtual stage
  size_t first_unit = 0, end_unit = 0;  // its units
  nn::ParamSet::Id first_id = 0, end_id = 0;
  int64_t begin = 0, end = 0;  // its parameter range (floats)
  bool backward_here = true;   // some unit of it (or below) learns
  bool sends_dx = false;       // the previous chunk waits for dL/dx
  Shape in_shape, out_shape;   // its activations, a micro-batch
  std::vector<Slot> slots;     // micro-batches in flight
  std::vector<std::unique_ptr<nn::Cache>> recompute_caches;
  std::vector<comm::Handle> recompute_sends;      // sends reading the recompute caches
  std::unique_ptr<optim::Optimizer> optimizer;    // over [begin, end)
  std::vector<optim::Segment> norm_segments;      // what it adds to the global norm
  TreeSum micro_sum;                              // deterministic mode's order
  std::unique_ptr<GradientReducer> data_reducer;  // D > 1: its buckets over the data axis
  std::vector<Tensor> wire;                       // the data codec's buffers
};

// A parameter declared by one chunk's unit (owner) and read by a later chunk's (user).
struct MeshStrategy::Tie {
  nn::ParamSet::Id id = 0;
  size_t owner_unit = 0;
  int owner_chunk = 0, user_chunk = 0;  // among all chunks
  int owner = 0, user = 0;              // their stages (ranks of the pipeline group)
  Tensor staging;                       // the owner's: the user's gradient as it arrives
  comm::Handle value_recv;              // the user's: this step's values from the owner
  bool value_pending = false;
  std::vector<comm::Handle> grad_sends;  // the user's: gradients still on the wire
};

}  // namespace braid::parallel
