#include "nn/gpt.h"

#include <cmath>

#include "core/gemm.h"
#include "core/kernels.h"

namespace braid::nn {
namespace {

class BlockCache : public Cache {
 public:
  std::unique_ptr<Cache> ln_1, attn, ln_2, c_fc, gelu, c_proj;
  Tensor x1;   // x + attn(ln_1(x)), the second residual stream input
  Tensor dx1;  // dL/dx1
};

class EmbeddingCache : public Cache {
 public:
  std::unique_ptr<Cache> wte;
};

class HeadCache : public Cache {
 public:
  std::unique_ptr<Cache> ln_f;
  Tensor dh;  // [B, T, D] dL/d ln_f(x)
  Precision precision = Precision::fp32;
  Tensor hf_rounded;  // bf16, fp16: ln_f's output rounded, for the head's weight gradient
};

class GptCache : public Cache {
 public:
  std::unique_ptr<Cache> embedding, head;
  std::vector<std::unique_ptr<Cache>> blocks;
};

// Checked before any member is built, so a bad config fails with the GPT's own message.
const GptConfig& validated(const GptConfig& c) {
  BRAID_CHECK(c.vocab > 0 && c.context > 0 && c.d_model > 0 && c.heads > 0 && c.layers > 0 &&
                  c.mlp_ratio > 0,
              "GPT config: vocab (", c.vocab, "), context (", c.context, "), d_model (", c.d_model,
              "), heads (", c.heads, "), layers (", c.layers, ") and mlp_ratio (", c.mlp_ratio,
              ") must all be positive");
  BRAID_CHECK(c.d_model % c.heads == 0, "GPT config: d_model (", c.d_model,
              ") must be a multiple of heads (", c.heads, ")");
  return c;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

GptBlock::GptBlock(int64_t d_model, int64_t heads, int64_t mlp_ratio)
    : ln_1_(d_model),
      attn_(d_model, heads),
      ln_2_(d_model),
      c_fc_(d_model, mlp_ratio * d_model),
      gelu_(GeluApprox::tanh),
      c_proj_(mlp_ratio * d_model, d_model) {
  // Each of these feeds a Linear alone: under bf16 they write its operand (rounded_output.h).
  ln_1_.set_output_feeds_product(true);
  ln_2_.set_output_feeds_product(true);
  gelu_.set_output_feeds_product(true);
}

void GptBlock::declare(ParamSet& params, const std::string& prefix) {
  ln_1_.declare(params, prefix + "ln_1.");
  attn_.declare(params, prefix + "attn.");
  ln_2_.declare(params, prefix + "ln_2.");
  c_fc_.declare(params, prefix + "mlp.c_fc.");
  c_proj_.declare(params, prefix + "mlp.c_proj.");
}

void GptBlock::init(Rng& rng) {
  ln_1_.init(rng);
  attn_.init(rng);
  ln_2_.init(rng);
  c_fc_.init(rng);
  c_proj_.init(rng);
}

std::unique_ptr<Cache> GptBlock::make_cache() const {
  auto c = std::make_unique<BlockCache>();
  c->ln_1 = ln_1_.make_cache();
  c->attn = attn_.make_cache();
  c->ln_2 = ln_2_.make_cache();
  c->c_fc = c_fc_.make_cache();
  c->gelu = gelu_.make_cache();
  c->c_proj = c_proj_.make_cache();
  return c;
}

// x [B, T, D] -> out [B, T, D]
const Tensor& GptBlock::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<BlockCache&>(cache);
  const Tensor& a = attn_.forward(ln_1_.forward(x, *c.ln_1, ctx), *c.attn, ctx);
  c.x1.ensure(x.shape());
  add(x.f32(), a.f32(), c.x1.f32(), x.numel());
  const Tensor& h = c_fc_.forward(ln_2_.forward(c.x1, *c.ln_2, ctx), *c.c_fc, ctx);  // [B,T,4D]
  const Tensor& m = c_proj_.forward(gelu_.forward(h, *c.gelu, ctx), *c.c_proj, ctx);
  c.out.ensure(x.shape());
  add(c.x1.f32(), m.f32(), c.out.f32(), x.numel());
  return c.out;
}

const Tensor& GptBlock::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<BlockCache&>(cache);
  BRAID_CHECK(dy.shape() == c.x1.shape(), "GptBlock: backward got dy ", dy.shape().str(),
              " for input ", c.x1.shape().str());
  const Tensor& dgelu = c_proj_.backward(dy, *c.c_proj, true);
  const Tensor& dfc = gelu_.backward(dgelu, *c.gelu, true);
  const Tensor& dln2 = c_fc_.backward(dfc, *c.c_fc, true);
  const Tensor& dx1_branch = ln_2_.backward(dln2, *c.ln_2, true);
  c.dx1.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  add(dy.f32(), dx1_branch.f32(), c.dx1.f32(), dy.numel());
  const Tensor& dln1 = attn_.backward(c.dx1, *c.attn, true);
  const Tensor& dx_branch = ln_1_.backward(dln1, *c.ln_1, need_dx);
  if (!need_dx) return no_grad();
  c.dx.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  add(c.dx1.f32(), dx_branch.f32(), c.dx.f32(), dy.numel());
  return c.dx;
}

double GptBlock::forward_flops(const Shape& in) const {
  Shape hidden = in;
  hidden[-1] = c_fc_.out_features();
  return attn_.forward_flops(in) + c_fc_.forward_flops(in) + c_proj_.forward_flops(hidden);
}

GptEmbedding::GptEmbedding(int64_t vocab, int64_t context, int64_t d_model)
    : wte_(vocab, d_model), wpe_(context, d_model) {}

void GptEmbedding::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  wte_.declare(params, prefix + "wte.");
  wpe_.declare(params, prefix + "wpe.");
}

Shape GptEmbedding::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 2, "GPT: input shape ", in.str(), " is not [batch, time] of token ids");
  BRAID_CHECK(in[1] >= 1 && in[1] <= wpe_.num_embeddings(), "GPT: sequence length ", in[1],
              " (input ", in.str(), ") must be between 1 and the model's context of ",
              wpe_.num_embeddings(), " tokens; shorten the sequences or raise the context");
  return Shape{in[0], in[1], wte_.dim()};
}

std::unique_ptr<Cache> GptEmbedding::make_cache() const {
  auto c = std::make_unique<EmbeddingCache>();
  c->wte = wte_.make_cache();
  return c;
}

// tokens [B, T] i32 -> [B, T, D]
const Tensor& GptEmbedding::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<EmbeddingCache&>(cache);
  const Shape out_shape = output_shape(x.shape());
  const int64_t B = out_shape[0], T = out_shape[1], D = out_shape[2];
  const Tensor& tok = wte_.forward(x, *c.wte, ctx);  // checks dtype and ids
  c.out.ensure(out_shape);
  const float* pos = params_->param(wpe_.weight_id()).f32();
  for (int64_t b = 0; b < B; ++b) add(tok.f32() + b * T * D, pos, c.out.f32() + b * T * D, T * D);
  return c.out;
}

const Tensor& GptEmbedding::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<EmbeddingCache&>(cache);
  BRAID_CHECK(!need_dx,
              "GPT: backward asked for dL/dx, but the inputs are integer token ids "
              "and have no gradient; call backward with need_dx = false");
  BRAID_CHECK(dy.shape() == c.out.shape(), "GPT embedding: backward got dy ", dy.shape().str(),
              " for output ", c.out.shape().str());
  const int64_t B = dy.dim(0), T = dy.dim(1), D = dy.dim(2);
  float* dpos = params_->grad(wpe_.weight_id()).f32();
  for (int64_t b = 0; b < B; ++b) add_inplace(dy.f32() + b * T * D, dpos, T * D);
  wte_.backward(dy, *c.wte, false);
  return no_grad();
}

GptHead::GptHead(int64_t d_model, int64_t vocab)
    : d_model_(d_model), vocab_(vocab), ln_f_(d_model) {}

void GptHead::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  ln_f_.declare(params, prefix + "ln_f.");
}

Shape GptHead::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 3 && in[2] == d_model_, "GPT head: input ", in.str(),
              " is not [batch, time, ", d_model_, "]");
  return Shape{in[0], in[1], vocab_};
}

std::unique_ptr<Cache> GptHead::make_cache() const {
  auto c = std::make_unique<HeadCache>();
  c->ln_f = ln_f_.make_cache();
  return c;
}

// x [B, T, D] -> logits [B, T, V]
const Tensor& GptHead::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<HeadCache&>(cache);
  const Shape out_shape = output_shape(x.shape());
  const int64_t BT = out_shape[0] * out_shape[1];
  const Tensor& hf = ln_f_.forward(x, *c.ln_f, ctx);
  c.out.ensure(out_shape);
  c.precision = ctx.precision;
  // logits[BT, V] = hf[BT, D] wte[V, D]^T
  head_.forward(c.precision, hf.f32(), params_->param(wte_).f32(), nullptr, BT, d_model_, vocab_,
                c.out.f32(), c.hf_rounded);
  return c.out;
}

const Tensor& GptHead::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<HeadCache&>(cache);
  BRAID_CHECK(dy.shape() == c.out.shape(), "GPT: backward got dlogits ", dy.shape().str(),
              " for logits ", c.out.shape().str());
  const int64_t B = dy.dim(0), T = dy.dim(1), D = d_model_, V = vocab_;
  const Tensor& hf = c.ln_f->out;
  // The tied head: dwte[V, D] (+)= dlogits^T[V, BT] hf[BT, D]; dh[BT, D] = dlogits wte.
  bool overwrite = false;
  float* dwte = params_->grad_for_write(wte_, overwrite).f32();
  head_.take_dy(c.precision, dy.f32(), B * T, V, nullptr);
  head_.weight_grad(c.precision, dy.f32(), hf.f32(), c.hf_rounded, B * T, D, V, overwrite, dwte);
  c.dh.ensure({B, T, D}, DType::f32, MemCategory::activation_grads);
  head_.input_grad(c.precision, dy.f32(), params_->param(wte_).f32(), B * T, D, V, c.dh.f32());
  return ln_f_.backward(c.dh, *c.ln_f, need_dx);
}

double GptHead::forward_flops(const Shape& in) const {
  return 2.0 * static_cast<double>(in[0] * in[1]) * static_cast<double>(d_model_) *
         static_cast<double>(vocab_);
}

Gpt::Gpt(const GptConfig& config)
    : config_(validated(config)),
      embedding_(config.vocab, config.context, config.d_model),
      head_(config.d_model, config.vocab) {
  for (int64_t i = 0; i < config.layers; ++i)
    blocks_.push_back(std::make_unique<GptBlock>(config.d_model, config.heads, config.mlp_ratio));
}

void Gpt::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  first_ = params.layout().size();
  embedding_.declare(params, prefix);
  head_.set_tied_weight(embedding_.wte_id());
  block_params_.clear();
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const ParamSet::Id before = params.layout().size();
    blocks_[i]->declare(params, prefix + "h." + std::to_string(i) + ".");
    block_params_.emplace_back(before, params.layout().size());
  }
  ln_f_first_ = params.layout().size();
  head_.declare(params, prefix);
  end_ = params.layout().size();
}

// GPT-2's initialisation (nanoGPT's _init_weights), by parameter name: the residual
// projections are scaled down by sqrt(2 layers) so the residual stream's variance does not
// grow with depth.
void Gpt::init(Rng& rng) {
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config_.layers));
  for (ParamSet::Id id = first_; id < end_; ++id) {
    const std::string& name = params_->info(id).name;
    Tensor w = params_->param(id);
    float* v = w.f32();
    if (ends_with(name, "bias")) {
      fill(0.0f, v, w.numel());
    } else if (ends_with(name, "ln_1.weight") || ends_with(name, "ln_2.weight") ||
               ends_with(name, "ln_f.weight")) {
      fill(1.0f, v, w.numel());
    } else {
      const float std = ends_with(name, "c_proj.weight") ? proj_std : 0.02f;
      for (int64_t i = 0; i < w.numel(); ++i) v[i] = std * rng.normal();
    }
  }
}

Shape Gpt::output_shape(const Shape& in) const {
  const Shape x = embedding_.output_shape(in);
  return Shape{x[0], x[1], config_.vocab};
}

std::unique_ptr<Cache> Gpt::make_cache() const {
  auto c = std::make_unique<GptCache>();
  c->embedding = embedding_.make_cache();
  for (const auto& b : blocks_) c->blocks.push_back(b->make_cache());
  c->head = head_.make_cache();
  return c;
}

// tokens [B, T] i32 -> logits [B, T, V]
const Tensor& Gpt::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<GptCache&>(cache);
  const ParamSet::Id blocks_first = block_params_.empty() ? ln_f_first_ : block_params_[0].first;
  params_->about_to_use(first_, blocks_first);  // wte (also the head) and wpe
  const Tensor* h = &embedding_.forward(x, *c.embedding, ctx);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    params_->about_to_use(block_params_[i].first, block_params_[i].second);
    h = &blocks_[i]->forward(*h, *c.blocks[i], ctx);
  }
  params_->about_to_use(ln_f_first_, end_);
  return head_.forward(*h, *c.head, ctx);
}

const Tensor& Gpt::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<GptCache&>(cache);
  BRAID_CHECK(!need_dx,
              "GPT: backward asked for dL/dx, but the inputs are integer token ids "
              "and have no gradient; call backward with need_dx = false");
  const Tensor* g = &head_.backward(dy, *c.head, true);
  params_->mark_ready(ln_f_first_, end_);
  for (size_t i = blocks_.size(); i-- > 0;) {
    g = &blocks_[i]->backward(*g, *c.blocks[i], true);
    params_->mark_ready(block_params_[i].first, block_params_[i].second);
  }
  // The tied embedding's gradient is final only now: the head wrote it first.
  embedding_.backward(*g, *c.embedding, false);
  params_->mark_ready(first_, block_params_.empty() ? ln_f_first_ : block_params_[0].first);
  return no_grad();
}

std::vector<PipelineUnit> Gpt::pipeline_units() {
  const ParamSet::Id blocks_first = block_params_.empty() ? ln_f_first_ : block_params_[0].first;
  std::vector<PipelineUnit> units;
  units.push_back({.module = &embedding_,
                   .name = "embedding",
                   .first = first_,
                   .end = blocks_first,
                   .buffers_first = 0,
                   .buffers_end = 0,
                   .tied = {}});
  for (size_t i = 0; i < blocks_.size(); ++i)
    units.push_back({.module = blocks_[i].get(),
                     .name = "h." + std::to_string(i),
                     .first = block_params_[i].first,
                     .end = block_params_[i].second,
                     .buffers_first = 0,
                     .buffers_end = 0,
                     .tied = {}});
  units.push_back({.module = &head_,
                   .name = "head",
                   .first = ln_f_first_,
                   .end = end_,
                   .buffers_first = 0,
                   .buffers_end = 0,
                   .tied = {embedding_.wte_id()}});
  return units;
}

double Gpt::forward_flops(const Shape& in) const {
  const Shape out = output_shape(in);
  const Shape hidden{out[0], out[1], config_.d_model};
  double total = head_.forward_flops(hidden);
  for (const auto& b : blocks_) total += b->forward_flops(hidden);
  return total;
}

std::unique_ptr<Module> make_gpt(const GptConfig& config) { return std::make_unique<Gpt>(config); }

}  // namespace braid::nn
