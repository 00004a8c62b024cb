#include "nn/gpt_tensor_parallel.h"

#include <algorithm>

#include "core/kernels.h"

namespace braid::nn {
namespace {

class TpBlockCache : public Cache {
 public:
  std::unique_ptr<Cache> ln_1, attn, ln_2, c_fc, gelu, c_proj;
  Tensor x1, dx1;
};

class TpHeadCache : public Cache {
 public:
  std::unique_ptr<Cache> ln_f;
  Tensor dh, hf_rounded;
  Precision precision = Precision::fp32;
};

class TpGptCache : public Cache {
 public:
  std::unique_ptr<Cache> embedding, head;
  std::vector<std::unique_ptr<Cache>> blocks;
};

int64_t part(int64_t whole, int ranks, const char* what) {
  BRAID_CHECK(ranks >= 1 && whole % ranks == 0, "tensor parallel: ", what, " (", whole,
              ") must be a multiple of the ", ranks, " ranks that split it");
  return whole / ranks;
}

}  // namespace

TpGptBlock::TpGptBlock(const GptConfig& c, TensorReducer& reducer)
    : reducer_(reducer),
      d_model_(c.d_model),
      ln_1_(c.d_model),
      attn_(c.d_model, c.heads, part(c.heads, reducer.size(), "heads"), /*proj_bias=*/false),
      ln_2_(c.d_model),
      c_fc_(c.d_model, part(c.mlp_ratio * c.d_model, reducer.size(), "the MLP's hidden width")),
      gelu_(GeluApprox::tanh),
      c_proj_(part(c.mlp_ratio * c.d_model, reducer.size(), "the MLP's hidden width"), c.d_model,
              /*bias=*/false) {
  ln_1_.set_output_feeds_product(true);
  ln_2_.set_output_feeds_product(true);
  gelu_.set_output_feeds_product(true);
}

void TpGptBlock::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  ln_1_.declare(params, prefix + "ln_1.");
  attn_.declare(params, prefix + "attn.");
  attn_bias_ = params.declare(prefix + "attn.c_proj.bias", {d_model_}, /*decay=*/false);
  ln_2_.declare(params, prefix + "ln_2.");
  c_fc_.declare(params, prefix + "mlp.c_fc.");
  c_proj_.declare(params, prefix + "mlp.c_proj.");
  mlp_bias_ = params.declare(prefix + "mlp.c_proj.bias", {d_model_}, /*decay=*/false);
}

std::unique_ptr<Cache> TpGptBlock::make_cache() const {
  auto c = std::make_unique<TpBlockCache>();
  c->ln_1 = ln_1_.make_cache();
  c->attn = attn_.make_cache();
  c->ln_2 = ln_2_.make_cache();
  c->c_fc = c_fc_.make_cache();
  c->gelu = gelu_.make_cache();
  c->c_proj = c_proj_.make_cache();
  return c;
}

const Tensor& TpGptBlock::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<TpBlockCache&>(cache);
  const int64_t n = x.numel(), rows = n / d_model_;
  // Each rank's heads give their part of the projection; the sum is the whole, then the
  // bias once.
  const Tensor& a = attn_.forward(ln_1_.forward(x, *c.ln_1, ctx), *c.attn, ctx);
  reducer_.sum(a.f32(), static_cast<size_t>(n));
  add_bias_rows(a.f32(), params_->param(attn_bias_).f32(), rows, d_model_);
  c.x1.ensure(x.shape());
  add(x.f32(), a.f32(), c.x1.f32(), n);
  const Tensor& h = c_fc_.forward(ln_2_.forward(c.x1, *c.ln_2, ctx), *c.c_fc, ctx);
  const Tensor& m = c_proj_.forward(gelu_.forward(h, *c.gelu, ctx), *c.c_proj, ctx);
  reducer_.sum(m.f32(), static_cast<size_t>(n));
  add_bias_rows(m.f32(), params_->param(mlp_bias_).f32(), rows, d_model_);
  c.out.ensure(x.shape());
  add(c.x1.f32(), m.f32(), c.out.f32(), n);
  return c.out;
}

const Tensor& TpGptBlock::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<TpBlockCache&>(cache);
  BRAID_CHECK(dy.shape() == c.x1.shape(), "TpGptBlock: backward got dy ", dy.shape().str(),
              " for input ", c.x1.shape().str());
  const int64_t n = dy.numel(), rows = n / d_model_;
  sum_rows_into(dy.f32(), params_->grad(mlp_bias_).f32(), rows, d_model_);
  const Tensor& dgelu = c_proj_.backward(dy, *c.c_proj, true);
  const Tensor& dfc = gelu_.backward(dgelu, *c.gelu, true);
  const Tensor& dln2 = c_fc_.backward(dfc, *c.c_fc, true);
  reducer_.sum(dln2.f32(), static_cast<size_t>(n));  // every rank's hidden units' share
  const Tensor& dx1_branch = ln_2_.backward(dln2, *c.ln_2, true);
  c.dx1.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  add(dy.f32(), dx1_branch.f32(), c.dx1.f32(), n);
  sum_rows_into(c.dx1.f32(), params_->grad(attn_bias_).f32(), rows, d_model_);
  const Tensor& dln1 = attn_.backward(c.dx1, *c.attn, true);
  reducer_.sum(dln1.f32(), static_cast<size_t>(n));  // every rank's heads' share
  const Tensor& dx_branch = ln_1_.backward(dln1, *c.ln_1, need_dx);
  if (!need_dx) return no_grad();
  c.dx.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  add(c.dx1.f32(), dx_branch.f32(), c.dx.f32(), n);
  return c.dx;
}

TpGptEmbedding::TpGptEmbedding(const GptConfig& c, TensorReducer& reducer)
    : config_(c),
      reducer_(reducer),
      local_vocab_(part(c.vocab, reducer.size(), "the vocabulary")),
      vocab_first_(reducer.rank() * local_vocab_) {}

void TpGptEmbedding::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  wte_ = params.declare(prefix + "wte.weight", {local_vocab_, config_.d_model}, true);
  wpe_ = params.declare(prefix + "wpe.weight", {config_.context, config_.d_model}, true);
}

Shape TpGptEmbedding::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 2, "GPT: input shape ", in.str(), " is not [batch, time] of token ids");
  BRAID_CHECK(in[1] >= 1 && in[1] <= config_.context, "GPT: sequence length ", in[1], " (input ",
              in.str(), ") must be between 1 and the model's context of ", config_.context,
              " tokens; shorten the sequences or raise the context");
  return Shape{in[0], in[1], config_.d_model};
}

const Tensor& TpGptEmbedding::forward(const Tensor& x, Cache& c, const ForwardContext& ctx) {
  (void)ctx;
  const Shape out_shape = output_shape(x.shape());
  BRAID_CHECK(x.dtype() == DType::i32, "GPT: token ids must be i32, got ", dtype_name(x.dtype()));
  const int64_t B = out_shape[0], T = out_shape[1], D = config_.d_model, BT = B * T;
  const int32_t* ids = x.data<int32_t>();
  for (int64_t i = 0; i < BT; ++i)
    BRAID_CHECK(ids[i] >= 0 && ids[i] < config_.vocab, "GPT: token id ", ids[i], " at position ", i,
                " is outside the vocabulary [0, ", config_.vocab, ")");
  c.x = x;
  c.out.ensure(out_shape);
  const float* wte = params_->param(wte_).f32();
  for (int64_t i = 0; i < BT; ++i) {
    const int64_t local = ids[i] - vocab_first_;
    float* row = c.out.f32() + i * D;
    if (local >= 0 && local < local_vocab_)
      std::copy(wte + local * D, wte + (local + 1) * D, row);
    else
      fill(0.0f, row, D);
  }
  reducer_.sum(c.out.f32(), static_cast<size_t>(BT * D));  // each row from the rank holding it
  const float* pos = params_->param(wpe_).f32();
  for (int64_t b = 0; b < B; ++b) add_inplace(pos, c.out.f32() + b * T * D, T * D);
  return c.out;
}

const Tensor& TpGptEmbedding::backward(const Tensor& dy, Cache& c, bool need_dx) {
  BRAID_CHECK(!need_dx, "GPT: backward asked for dL/dx of integer token ids");
  BRAID_CHECK(dy.shape() == c.out.shape(), "GPT embedding: backward got dy ", dy.shape().str(),
              " for output ", c.out.shape().str());
  const int64_t B = dy.dim(0), T = dy.dim(1), D = config_.d_model, BT = B * T;
  float* dpos = params_->grad(wpe_).f32();
  for (int64_t b = 0; b < B; ++b) add_inplace(dy.f32() + b * T * D, dpos, T * D);
  // The head wrote wte's gradient first (one process's order); the rows add to it.
  float* dwte = params_->grad(wte_).f32();
  const int32_t* ids = c.x.data<int32_t>();
  for (int64_t i = 0; i < BT; ++i) {
    const int64_t local = ids[i] - vocab_first_;
    if (local >= 0 && local < local_vocab_) add_inplace(dy.f32() + i * D, dwte + local * D, D);
  }
  return no_grad();
}

TpGptHead::TpGptHead(const GptConfig& c, TensorReducer& reducer, int64_t local_vocab)
    : reducer_(reducer), d_model_(c.d_model), local_vocab_(local_vocab), ln_f_(c.d_model) {}

void TpGptHead::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  ln_f_.declare(params, prefix + "ln_f.");
}

Shape TpGptHead::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 3 && in[2] == d_model_, "GPT head: input ", in.str(),
              " is not [batch, time, ", d_model_, "]");
  return Shape{in[0], in[1], local_vocab_};
}

std::unique_ptr<Cache> TpGptHead::make_cache() const {
  auto c = std::make_unique<TpHeadCache>();
  c->ln_f = ln_f_.make_cache();
  return c;
}

const Tensor& TpGptHead::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<TpHeadCache&>(cache);
  const Shape out_shape = output_shape(x.shape());
  const int64_t BT = out_shape[0] * out_shape[1];
  const Tensor& hf = ln_f_.forward(x, *c.ln_f, ctx);
  c.out.ensure(out_shape);
  c.precision = ctx.precision;
  head_.forward(c.precision, hf.f32(), params_->param(wte_).f32(), nullptr, BT, d_model_,
                local_vocab_, c.out.f32(), c.hf_rounded);
  return c.out;
}

const Tensor& TpGptHead::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<TpHeadCache&>(cache);
  BRAID_CHECK(dy.shape() == c.out.shape(), "GPT: backward got dlogits ", dy.shape().str(),
              " for logits ", c.out.shape().str());
  const int64_t B = dy.dim(0), T = dy.dim(1), D = d_model_, BT = B * T;
  const Tensor& hf = c.ln_f->out;
  bool overwrite = false;
  float* dwte = params_->grad_for_write(wte_, overwrite).f32();
  head_.take_dy(c.precision, dy.f32(), BT, local_vocab_, nullptr);
  head_.weight_grad(c.precision, dy.f32(), hf.f32(), c.hf_rounded, BT, D, local_vocab_, overwrite,
                    dwte);
  c.dh.ensure({B, T, D}, DType::f32, MemCategory::activation_grads);
  head_.input_grad(c.precision, dy.f32(), params_->param(wte_).f32(), BT, D, local_vocab_,
                   c.dh.f32());
  reducer_.sum(c.dh.f32(), static_cast<size_t>(BT * D));  // every vocabulary slice's share
  return ln_f_.backward(c.dh, *c.ln_f, need_dx);
}

TensorParallelGpt::TensorParallelGpt(const GptConfig& config, TensorReducer& reducer)
    : config_(config),
      embedding_(config, reducer),
      head_(config, reducer, embedding_.local_vocab()) {
  for (int64_t i = 0; i < config.layers; ++i)
    blocks_.push_back(std::make_unique<TpGptBlock>(config, reducer));
}

void TensorParallelGpt::declare(ParamSet& params, const std::string& prefix) {
  unit_params_.clear();
  auto unit = [&](Module& m, const std::string& name) {
    const ParamSet::Id before = params.layout().size();
    m.declare(params, prefix + name);
    unit_params_.emplace_back(before, params.layout().size());
  };
  unit(embedding_, "");
  head_.set_tied_weight(embedding_.wte_id());
  for (size_t i = 0; i < blocks_.size(); ++i) unit(*blocks_[i], "h." + std::to_string(i) + ".");
  unit(head_, "");
}

Shape TensorParallelGpt::output_shape(const Shape& in) const {
  const Shape x = embedding_.output_shape(in);
  return head_.output_shape(x);
}

std::unique_ptr<Cache> TensorParallelGpt::make_cache() const {
  auto c = std::make_unique<TpGptCache>();
  c->embedding = embedding_.make_cache();
  for (const auto& b : blocks_) c->blocks.push_back(b->make_cache());
  c->head = head_.make_cache();
  return c;
}

const Tensor& TensorParallelGpt::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<TpGptCache&>(cache);
  const Tensor* h = &embedding_.forward(x, *c.embedding, ctx);
  for (size_t i = 0; i < blocks_.size(); ++i) h = &blocks_[i]->forward(*h, *c.blocks[i], ctx);
  return head_.forward(*h, *c.head, ctx);
}

const Tensor& TensorParallelGpt::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<TpGptCache&>(cache);
  BRAID_CHECK(!need_dx, "GPT: backward asked for dL/dx of integer token ids");
  const Tensor* g = &head_.backward(dy, *c.head, true);
  for (size_t i = blocks_.size(); i-- > 0;) g = &blocks_[i]->backward(*g, *c.blocks[i], true);
  return embedding_.backward(*g, *c.embedding, false);
}

std::vector<WidthCut> gpt_width_cuts(const GptConfig& c, int rank, int ranks) {
  const int64_t D = c.d_model, t = rank;
  const int64_t W = part(D, ranks, "the model width");
  const int64_t F = part(c.mlp_ratio * D, ranks, "the MLP's hidden width");
  const int64_t V = part(c.vocab, ranks, "the vocabulary");
  std::vector<WidthCut> cuts{{"wte.weight", false, {{t * V, V}}}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    const std::vector<std::pair<int64_t, int64_t>> qkv{
        {t * W, W}, {D + t * W, W}, {2 * D + t * W, W}};
    cuts.push_back({h + "attn.c_attn.weight", false, qkv});
    cuts.push_back({h + "attn.c_attn.bias", false, qkv});
    cuts.push_back({h + "attn.c_proj.weight", true, {{t * W, W}}});
    cuts.push_back({h + "mlp.c_fc.weight", false, {{t * F, F}}});
    cuts.push_back({h + "mlp.c_fc.bias", false, {{t * F, F}}});
    cuts.push_back({h + "mlp.c_proj.weight", true, {{t * F, F}}});
  }
  return cuts;
}

std::vector<PipelineUnit> TensorParallelGpt::pipeline_units() {
  std::vector<PipelineUnit> units;
  auto unit = [&](Module* m, std::string name, size_t i, std::vector<ParamSet::Id> tied) {
    units.push_back({.module = m,
                     .name = std::move(name),
                     .first = unit_params_[i].first,
                     .end = unit_params_[i].second,
                     .buffers_first = 0,
                     .buffers_end = 0,
                     .tied = std::move(tied)});
  };
  unit(&embedding_, "embedding", 0, {});
  for (size_t i = 0; i < blocks_.size(); ++i)
    unit(blocks_[i].get(), "h." + std::to_string(i), i + 1, {});
  unit(&head_, "head", blocks_.size() + 1, {embedding_.wte_id()});
  return units;
}

}  // namespace braid::nn
