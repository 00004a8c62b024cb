// A Sequential model cut by width across the ranks of a TensorReducer, as the seed
// documents' Keras example splits a network's layers across devices: every Linear that is
// followed (through elementwise activations only) by another Linear forms a Megatron pair
// (parallel_linear.h): the first column-parallel (this rank's out/T units), the activations
// on that part, the second row-parallel (summed over the ranks). Linear layers outside a
// pair, and Flatten, stay whole on every rank. Supported children: Flatten, Linear, ReLU,
// Tanh, Sigmoid, GELU; anything else is an error naming the layer. Parameter names are the
// Sequential's ("<i>.weight", "<i>.bias") with local shapes; `cuts` maps them to the full
// model's.
#pragma once

#include <memory>
#include <vector>

#include "nn/sequential.h"
#include "nn/tensor_reducer.h"
#include "nn/width_cut.h"

namespace braid::nn {

struct WidthCutModel {
  std::unique_ptr<Module> model;
  std::vector<WidthCut> cuts;
};

WidthCutModel cut_sequential(const Sequential& full, TensorReducer& reducer);

}  // namespace braid::nn
