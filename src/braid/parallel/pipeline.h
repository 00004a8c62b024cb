// Pipeline parallelism alone: every rank of the group one stage (mesh_strategy.h, with a
// mesh of 1 data x 1 tensor x P pipeline).
#pragma once

#include <memory>

#include "parallel/mesh_strategy.h"

namespace braid::parallel {

class Pipeline : public MeshStrategy {
 public:
  Pipeline(std::unique_ptr<nn::Module> module, StepOptions options,
           std::shared_ptr<comm::Group> group, PipelineOptions pipeline)
      : MeshStrategy(std::move(module), std::move(options), group,
                     {.data = 1, .tensor = 1, .pipeline = group ? group->size() : 1},
                     std::move(pipeline)) {}
};

}  // namespace braid::parallel
