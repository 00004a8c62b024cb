// Strategy: what differs between one process, DDP, ZeRO, a parameter-server worker and a
// pipeline stage (DESIGN.md, "The strategy seam"). A strategy owns the parameters and
// gradients (a ParamSet), the optimizer (or its shard) and the groups it talks over; the
// trainer owns data, logging, evaluation and when to checkpoint, and sees only step() and
// state().
#pragma once

#include <string_view>

namespace braid::parallel {

class Strategy {
 public:
  virtual ~Strategy();
  virtual std::string_view name() const = 0;
};

}  // namespace braid::parallel
