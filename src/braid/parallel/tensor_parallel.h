// Tensor parallelism alone (Megatron-LM, Shoeybi et al. 2019): the GPT cut by width across
// every rank of the group (mesh_strategy.h, with a mesh of 1 data x T tensor x 1 pipeline;
// tensor_shards.h, nn/gpt_tensor_parallel.h), every rank stepping on the same batch. Each
// rank trains its shard: its part of the parameters, their gradients and the optimizer's
// state; the ranks exchange activations only, four sums a block a step each way, plus the
// vocabulary-parallel loss's row reductions. Within rounding of one process (the
// row-parallel products' partial sums add in another order), not bitwise.
#pragma once

#include <memory>

#include "parallel/mesh_strategy.h"

namespace braid::parallel {

class TensorParallel : public MeshStrategy {
 public:
  TensorParallel(std::unique_ptr<nn::Module> module, StepOptions options,
                 std::shared_ptr<comm::Group> group, int micro_batches = 1)
      : MeshStrategy(std::move(module), std::move(options), group,
                     {.data = 1, .tensor = group ? group->size() : 1, .pipeline = 1},
                     {.micro_batches = micro_batches,
                      .schedule = PipelineSchedule::one_f_one_b,
                      .recompute = false,
                      .cut = {}}) {}
};

}  // namespace braid::parallel
