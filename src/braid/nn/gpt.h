// GPT: the GPT-2 architecture (as nanoGPT, without dropout), a decoder-only transformer.
// Input i32 tokens [B, T] (T <= context), output f32 logits [B, T, vocab]:
//   x = wte[tokens] + wpe[0:T]; per block x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
//   with mlp = c_proj(gelu_tanh(c_fc(.))); logits = ln_f(x) wte^T (LM head tied to wte).
// Parameter names are those of the PyTorch module in bench/ (nanoGPT's, without the
// "transformer." prefix and without a separate lm_head tensor): wte.weight, wpe.weight,
// h.{i}.ln_1.*, h.{i}.attn.c_attn.*, h.{i}.attn.c_proj.*, h.{i}.ln_2.*, h.{i}.mlp.c_fc.*,
// h.{i}.mlp.c_proj.*, ln_f.*. init() is GPT-2's: weights N(0, 0.02), c_proj weights
// N(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorm 1 / 0. Tokens have no gradient:
// backward must be called with need_dx = false.
#pragma once

#include <vector>

#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"

namespace braid::nn {

struct GptConfig {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t layers = 4;
  int64_t mlp_ratio = 4;
};

// One pre-LN transformer block on [B, T, D] f32; its parameters are named
// "<prefix>ln_1.", "attn.", "ln_2.", "mlp.c_fc.", "mlp.c_proj." (PyTorch defaults from init;
// Gpt::init overrides them).
class GptBlock : public Module {
 public:
  GptBlock(int64_t d_model, int64_t heads, int64_t mlp_ratio);

  std::string_view kind() const override { return "GptBlock"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override { return attn_.output_shape(in); }
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override;

 private:
  LayerNorm ln_1_;
  CausalSelfAttention attn_;
  LayerNorm ln_2_;
  Linear c_fc_;
  Gelu gelu_;
  Linear c_proj_;
};

// The GPT's input: tokens [B, T] i32 -> x0 = wte[tokens] + wpe[0:T], [B, T, D] f32.
// Parameters "<prefix>wte.weight", "<prefix>wpe.weight". Backward adds into wte's gradient
// (the head, which shares it, writes it first in one process).
class GptEmbedding : public Module {
 public:
  GptEmbedding(int64_t vocab, int64_t context, int64_t d_model);

  std::string_view kind() const override { return "GptEmbedding"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  ParamSet::Id wte_id() const { return wte_.weight_id(); }

 private:
  Embedding wte_, wpe_;
  ParamSet* params_ = nullptr;
};

// The GPT's output: x [B, T, D] -> logits = ln_f(x) wte^T, [B, T, V]. Parameters
// "<prefix>ln_f.*"; it reads the embedding's wte (tied, set_tied_weight) and writes its
// gradient first (overwriting after zero_grads).
class GptHead : public Module {
 public:
  GptHead(int64_t d_model, int64_t vocab);

  std::string_view kind() const override { return "GptHead"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void set_tied_weight(ParamSet::Id wte) { wte_ = wte; }
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override;

 private:
  int64_t d_model_, vocab_;
  LayerNorm ln_f_;
  ParamSet* params_ = nullptr;
  ParamSet::Id wte_ = 0;
  XWtProduct head_;  // the tied head's products
};

class Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& config);

  std::string_view kind() const override { return "GPT"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override;
  // ln_f, then each block as its backward ends, then the embeddings (the head shares wte).
  bool reports_ready() const override { return true; }
  bool announces_use() const override { return true; }
  // The embedding, each block, the head (tied to the embedding's wte).
  std::vector<PipelineUnit> pipeline_units() override;

  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  GptEmbedding embedding_;
  std::vector<std::unique_ptr<GptBlock>> blocks_;
  GptHead head_;
  ParamSet* params_ = nullptr;
  ParamSet::Id first_ = 0, end_ = 0;  // this model's range of ids in the ParamSet
  std::vector<std::pair<ParamSet::Id, ParamSet::Id>> block_params_;  // from declare()
  ParamSet::Id ln_f_first_ = 0;
};

std::unique_ptr<Module> make_gpt(const GptConfig& config);

}  // namespace braid::nn
