// One rank's part of a model cut by width (nn/gpt_tensor_parallel.h,
// nn/sequential_tensor_parallel.h) and the map between its parameters and the full model's
// one-process layout.
//
// Each local parameter is the full one whole (replicated: LayerNorms, wpe, the row-parallel
// projections' biases) or runs of its rows or columns (nn::WidthCut). to_local() cuts a
// full-layout buffer (parameters, or an optimizer state of the same layout) into this
// rank's; to_full() writes this rank's back, so that the ranks' writes into a zeroed buffer,
// summed, give the whole model (replicated parameters written by tensor rank 0 only).
#pragma once

#include <memory>
#include <vector>

#include "nn/module.h"
#include "nn/params.h"
#include "nn/width_cut.h"
#include "optim/segment.h"

namespace braid::parallel {

class TensorShards {
 public:
  // `model`: this rank's part of the model (undeclared), `cuts` how its parameters cut the
  // full ones; `full`: the model's parameters in the one-process layout (declared).
  TensorShards(std::unique_ptr<nn::Module> model, const std::vector<nn::WidthCut>& cuts,
               const nn::ParamSet& full, int rank);
  ~TensorShards();

  nn::Module& model() { return *model_; }
  nn::ParamSet& params() { return params_; }
  const nn::ParamSet& params() const { return params_; }

  void to_local(const float* full, float* local) const;
  void to_full(const float* local, float* full) const;
  // Whether local parameter `id` is a cut of the full one (not replicated).
  bool is_cut(nn::ParamSet::Id id) const;

 private:
  struct Shard;
  const nn::ParamSet& full_;
  int rank_;
  std::unique_ptr<nn::Module> model_;
  nn::ParamSet params_;
  std::vector<Shard> shards_;
};

}  // namespace braid::parallel
