#include "nn/module.h"

namespace braid::nn {

const Tensor& no_grad() {
  static const Tensor none;
  return none;
}

}  // namespace braid::nn
