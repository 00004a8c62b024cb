// The GPT of gpt.h cut by width across T ranks, as Megatron-LM (Shoeybi et al. 2019): each
// rank holds one T-th of every large matrix and the ranks' parts meet in two sums a block
// in forward and two in backward (TensorReducer).
//
//   attention: c_attn column-parallel by heads (rank t makes q, k, v of heads
//              [t H/T, (t+1) H/T)), c_proj row-parallel (its rows' part of the output),
//              summed over ranks, then c_proj's bias; backward sums dL/d ln_1(x).
//   MLP:       c_fc column-parallel (hidden units [t 4D/T, ...)), GELU on the part,
//              c_proj row-parallel, summed, then its bias; backward sums dL/d ln_2(x).
//   embedding: vocabulary-parallel (wte rows [t V/T, ...)): each token's row comes from
//              the rank holding it (the others add zero), summed, then wpe.
//   head:      tied to the local wte rows: logits for this rank's vocabulary slice only;
//              the loss is vocab_parallel_loss.h's; backward sums dL/d ln_f(x).
// LayerNorms, wpe and the two c_proj biases are replicated: their inputs and gradients are
// the same on every rank. Parameters keep the full model's names with this rank's shapes;
// parallel/tensor_parallel.h maps them to the full layout. H, 4D and V must be multiples
// of T. Backward must be called with need_dx = false (token ids).
#pragma once

#include <memory>
#include <vector>

#include "nn/attention.h"
#include "nn/gelu.h"
#include "nn/gpt.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/tensor_reducer.h"
#include "nn/width_cut.h"

namespace braid::nn {

class TpGptBlock : public Module {
 public:
  TpGptBlock(const GptConfig& c, TensorReducer& reducer);

  std::string_view kind() const override { return "TpGptBlock"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override { return in; }
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

 private:
  TensorReducer& reducer_;
  int64_t d_model_;
  LayerNorm ln_1_;
  CausalSelfAttention attn_;
  LayerNorm ln_2_;
  Linear c_fc_;
  Gelu gelu_;
  Linear c_proj_;
  ParamSet* params_ = nullptr;
  ParamSet::Id attn_bias_ = 0, mlp_bias_ = 0;  // the row-parallel projections' biases
};

// Tokens [B, T] -> x0 [B, T, D]: each token's row from the rank holding it, summed, + wpe.
// Declares "wte.weight" (this rank's V/T rows) and "wpe.weight".
class TpGptEmbedding : public Module {
 public:
  TpGptEmbedding(const GptConfig& c, TensorReducer& reducer);

  std::string_view kind() const override { return "TpGptEmbedding"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  ParamSet::Id wte_id() const { return wte_; }
  int64_t local_vocab() const { return local_vocab_; }
  int64_t first_class() const { return vocab_first_; }

 private:
  GptConfig config_;
  TensorReducer& reducer_;
  int64_t local_vocab_, vocab_first_;
  ParamSet* params_ = nullptr;
  ParamSet::Id wte_ = 0, wpe_ = 0;
};

// x [B, T, D] -> this rank's logits [B, T, V/T] = ln_f(x) wte_local^T (tied to the
// embedding's rows); backward sums dL/d ln_f(x) over the ranks.
class TpGptHead : public Module {
 public:
  TpGptHead(const GptConfig& c, TensorReducer& reducer, int64_t local_vocab);

  std::string_view kind() const override { return "TpGptHead"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void set_tied_weight(ParamSet::Id wte) { wte_ = wte; }
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

 private:
  TensorReducer& reducer_;
  int64_t d_model_, local_vocab_;
  LayerNorm ln_f_;
  ParamSet* params_ = nullptr;
  ParamSet::Id wte_ = 0;
  XWtProduct head_;
};

class TensorParallelGpt : public Module {
 public:
  TensorParallelGpt(const GptConfig& config, TensorReducer& reducer);

  std::string_view kind() const override { return "GPT (tensor parallel)"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override;  // [B, T, V/T]: this rank's logits
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  // The embedding, each block, the head (tied to the embedding's wte rows).
  std::vector<PipelineUnit> pipeline_units() override;

  const GptConfig& config() const { return config_; }
  int64_t first_class() const { return embedding_.first_class(); }  // this rank's slice

 private:
  GptConfig config_;
  TpGptEmbedding embedding_;
  std::vector<std::unique_ptr<TpGptBlock>> blocks_;
  TpGptHead head_;
  std::vector<std::pair<ParamSet::Id, ParamSet::Id>> unit_params_;  // from declare()
};

// How rank `rank` of `ranks`' parameters of TensorParallelGpt cut the full GPT's: c_attn by
// heads (q, k and v rows), c_fc by rows, both c_proj weights by columns, wte by vocabulary
// rows; the rest is whole.
std::vector<WidthCut> gpt_width_cuts(const GptConfig& c, int rank, int ranks);

}  // namespace braid::nn
