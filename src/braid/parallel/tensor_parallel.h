// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) on the strategy seam: the GPT cut by
// width across the ranks of the group (nn/gpt_tensor_parallel.h), every rank stepping on
// the same batch. Each rank trains its own shard: the local model's parameters (a T-th of
// every large matrix, the small ones whole), their gradients and the optimizer's state
// over them; the ranks exchange activations only, four sums a block a step in each
// direction, plus the vocabulary-parallel loss's three row reductions.
//
// The full model (the strategy's module(), the GPT in its one-process layout with PyTorch
// names) is made from the shards only when asked: synchronize() (before evaluation and
// checkpoints) writes every rank's shards into it (one sum over ranks: each element comes
// from the one rank holding it, zero elsewhere), so evaluation runs the whole model on
// each rank's share of the split and a checkpoint is the one-process layout, which loads
// into any strategy, world size or PyTorch. It starts as the seed's initial model, sliced,
// so a run starts from one process's weights.
//
// Within rounding of one process (the row-parallel products' partial sums add in another
// order), not bitwise; deterministic run to run. Clipping takes the global norm from each
// rank's shards (the replicated parameters counted once); fp16's overflow is voted.
#pragma once

#include <memory>
#include <vector>

#include "nn/gpt_tensor_parallel.h"
#include "parallel/group_tensor_reducer.h"
#include "parallel/micro_batches.h"
#include "parallel/strategy.h"

namespace braid::parallel {

class TensorParallel : public Strategy {
 public:
  // `module` must be a GPT (nn::Gpt); its heads, MLP width and vocabulary must divide by
  // the group's size.
  TensorParallel(std::unique_ptr<nn::Module> module, StepOptions options,
                 std::shared_ptr<comm::Group> group);
  ~TensorParallel() override;

  std::string_view name() const override { return "tensor"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  void sync_parameters() override;
  void synchronize() override;
  void prepare_to_load() override {}
  void sum_over_ranks(double* values, size_t count, const char* what) override;
  void start_sum_over_ranks(double* values, size_t count, const char* what) override;
  void finish_sum_over_ranks() override {}
  int rank() const override;
  int world_size() const override;
  void gather_for_checkpoint() override;
  std::string_view optimizer_name() const override;
  optim::NamedTensors optimizer_state() const override;
  void load_optimizer_state(const optim::NamedTensors& state) override;

  // This rank's parameters (floats, padding included): about 1/T of the model's.
  int64_t local_floats() const { return local_params_.size(); }
  nn::ParamSet& local_params() { return local_params_; }

  // One local parameter's place in the full one: whole, or runs of rows or of columns.
  struct Shard;

 private:
  void to_local(const float* full, float* local) const;
  // Writes this rank's shards (and, on rank 0, the replicated parameters) into `full`,
  // leaving the rest as it is.
  void to_full(const float* local, float* full) const;
  // Every rank's shards into `full` (params_.size() floats) on every rank.
  void assemble(const float* local, float* full);

  std::shared_ptr<comm::Group> group_;
  GroupTensorReducer reducer_;
  std::unique_ptr<nn::TensorParallelGpt> local_;
  nn::ParamSet local_params_;
  std::unique_ptr<nn::Cache> local_cache_;
  std::unique_ptr<optim::Optimizer> local_optimizer_;
  std::vector<Shard> shards_;
  std::vector<optim::Segment> norm_segments_;  // what this rank adds to the global norm
  MicroBatches micro_;
  Tensor dlogits_local_, loss_work_;
  bool full_current_ = true;  // params_ holds the shards' values
  optim::NamedTensors gathered_;
};

}  // namespace braid::parallel
