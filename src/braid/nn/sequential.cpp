#include "nn/sequential.h"

#include "core/kernels.h"

namespace braid::nn {
namespace {

class SequentialCache : public Cache {
 public:
  std::vector<std::unique_ptr<Cache>> children;
};

class ResidualCache : public Cache {
 public:
  std::unique_ptr<Cache> body, shortcut;
};

}  // namespace

Sequential::Sequential(std::vector<std::unique_ptr<Module>> children)
    : children_(std::move(children)) {}

void Sequential::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  first_with_params_ = children_.size();
  child_params_.clear();
  child_buffers_.clear();
  for (size_t i = 0; i < children_.size(); ++i) {
    const ParamSet::Id before = params.layout().size();
    const size_t buffers_before = params.buffers().size();
    children_[i]->declare(params, prefix + std::to_string(i) + ".");
    child_params_.emplace_back(before, params.layout().size());
    child_buffers_.emplace_back(buffers_before, params.buffers().size());
    if (params.layout().size() > before && first_with_params_ == children_.size())
      first_with_params_ = i;
  }
}

void Sequential::init(Rng& rng) {
  for (auto& c : children_) c->init(rng);
}

Shape Sequential::output_shape(const Shape& in) const {
  Shape s = in;
  for (auto& c : children_) s = c->output_shape(s);
  return s;
}

std::unique_ptr<Cache> Sequential::make_cache() const {
  auto cache = std::make_unique<SequentialCache>();
  for (auto& c : children_) cache->children.push_back(c->make_cache());
  return cache;
}

const Tensor& Sequential::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<SequentialCache&>(cache);
  const Tensor* h = &x;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (params_ != nullptr && i < child_params_.size())
      params_->about_to_use(child_params_[i].first, child_params_[i].second);
    h = &children_[i]->forward(*h, *c.children[i], ctx);
  }
  return *h;
}

const Tensor& Sequential::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<SequentialCache&>(cache);
  const Tensor* g = &dy;
  for (size_t i = children_.size(); i-- > 0;) {
    // Below the first child with parameters nothing learns: no backward at all.
    if (!need_dx && i < first_with_params_) return no_grad();
    g = &children_[i]->backward(*g, *c.children[i], need_dx || i > first_with_params_);
    if (i < child_params_.size() && !children_[i]->reports_ready())
      params_->mark_ready(child_params_[i].first, child_params_[i].second);
  }
  return children_.empty() ? dy : *g;
}

std::vector<PipelineUnit> Sequential::pipeline_units() {
  std::vector<PipelineUnit> units;
  for (size_t i = 0; i < children_.size() && i < child_params_.size(); ++i)
    units.push_back({.module = children_[i].get(),
                     .name = std::to_string(i),
                     .first = child_params_[i].first,
                     .end = child_params_[i].second,
                     .buffers_first = child_buffers_[i].first,
                     .buffers_end = child_buffers_[i].second,
                     .tied = {}});
  return units;
}

double Sequential::forward_flops(const Shape& in) const {
  double total = 0;
  Shape s = in;
  for (auto& c : children_) {
    total += c->forward_flops(s);
    s = c->output_shape(s);
  }
  return total;
}

void Residual::declare(ParamSet& params, const std::string& prefix) {
  body_->declare(params, prefix + "body.");
  if (shortcut_) shortcut_->declare(params, prefix + "shortcut.");
}

Shape Residual::output_shape(const Shape& in) const {
  const Shape out = body_->output_shape(in);
  const Shape side = shortcut_ ? shortcut_->output_shape(in) : in;
  BRAID_CHECK(out == side, "Residual: body maps ", in.str(), " to ", out.str(),
              shortcut_ ? std::string(" but the shortcut to ").append(side.str())
                        : std::string("; without a shortcut a residual block must keep the shape"));
  return out;
}

std::unique_ptr<Cache> Residual::make_cache() const {
  auto cache = std::make_unique<ResidualCache>();
  cache->body = body_->make_cache();
  if (shortcut_) cache->shortcut = shortcut_->make_cache();
  return cache;
}

// The body runs first and the shortcut second, in the order their parameters are declared;
// backward goes the other way, so parameters become final in reverse declaration order, as
// the gradient buckets expect.
const Tensor& Residual::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<ResidualCache&>(cache);
  const Tensor& b = body_->forward(x, *c.body, ctx);
  const Tensor& side = shortcut_ ? shortcut_->forward(x, *c.shortcut, ctx) : x;
  c.out.ensure(b.shape());
  add(side.f32(), b.f32(), c.out.f32(), b.numel());
  return c.out;
}

const Tensor& Residual::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<ResidualCache&>(cache);
  const Tensor& ds = shortcut_ ? shortcut_->backward(dy, *c.shortcut, need_dx) : dy;
  const Tensor& db = body_->backward(dy, *c.body, need_dx);
  if (!need_dx) return no_grad();
  c.dx.ensure(db.shape(), DType::f32, MemCategory::activation_grads);
  add(ds.f32(), db.f32(), c.dx.f32(), db.numel());
  return c.dx;
}

}  // namespace braid::nn
