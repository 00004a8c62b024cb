#include "parallel/rank0_broadcast.h"

#include "comm/collectives.h"

namespace braid::parallel {

void broadcast_parameters(comm::ProgressEngine& engine, const nn::ParamSet& params) {
  engine
      .ibroadcast(params.params(), static_cast<size_t>(params.size()), DType::f32, 0,
                  comm::OpLabel("broadcast of rank 0's parameters"))
      .wait();
}

void broadcast_model_buffers(comm::ProgressEngine& engine, const nn::ParamSet& params) {
  engine
      .submit("broadcast of rank 0's model buffers",
              [&params](comm::Group& g) {
                for (const nn::NamedBuffer& b : params.buffers())
                  comm::broadcast(g, b.value.raw(), static_cast<size_t>(b.value.numel()),
                                  b.value.dtype(), 0);
              })
      .wait();
}

void broadcast_tensors(comm::ProgressEngine& engine, const optim::NamedTensors& tensors,
                       const char* what) {
  engine
      .submit(what,
              [&tensors](comm::Group& g) {
                for (const auto& [name, t] : tensors)
                  comm::broadcast(g, t.raw(), static_cast<size_t>(t.numel()), t.dtype(), 0);
              })
      .wait();
}

}  // namespace braid::parallel
