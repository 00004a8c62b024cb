// Rank 0's model to every rank of a data-parallel group, on its progress thread (each call
// waits): what DDP and ZeRO do at start, after a checkpoint is loaded, and (the buffers)
// before each step, as PyTorch's broadcast_buffers.
#pragma once

#include "comm/progress_engine.h"
#include "nn/params.h"
#include "optim/optimizer.h"

namespace braid::parallel {

// The flat parameter buffer.
void broadcast_parameters(comm::ProgressEngine& engine, const nn::ParamSet& params);
// The model's buffers (BatchNorm's running statistics), in one operation.
void broadcast_model_buffers(comm::ProgressEngine& engine, const nn::ParamSet& params);
// Named tensors (an optimizer's state), in one operation.
void broadcast_tensors(comm::ProgressEngine& engine, const optim::NamedTensors& tensors,
                       const char* what);

}  // namespace braid::parallel
