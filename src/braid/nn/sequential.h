// Sequential: children applied in order, named like torch.nn.Sequential ("0.", "1.", ...,
// activations included in the numbering).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "nn/params.h"

namespace braid::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::unique_ptr<Module>> children);

  void add(std::unique_ptr<Module> child) { children_.push_back(std::move(child)); }
  size_t size() const { return children_.size(); }
  Module& operator[](size_t i) const { return *children_[i]; }

  std::string_view kind() const override { return "Sequential"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override;

  // Called after each child's backward with the parameter ids [first, end) that child
  // declared, once their gradients are final: an optimizer can update them while they are
  // still in cache. Only for models where no parameter is used by two children.
  using BackwardHook = std::function<void(ParamSet::Id first, ParamSet::Id end)>;
  void set_backward_hook(BackwardHook hook) { backward_hook_ = std::move(hook); }

 private:
  std::vector<std::unique_ptr<Module>> children_;
  std::vector<std::pair<ParamSet::Id, ParamSet::Id>> child_params_;  // from declare()
  BackwardHook backward_hook_;
  // Children up to and including this one need no input gradient unless the caller asks
  // for one: nothing before them learns (mlp's Linear after Flatten). Until declare()
  // runs, every child but the first computes one.
  size_t first_with_params_ = 0;
};

// Residual: y = x + body(x). Body children are named "<prefix>body.<i>.".
class Residual : public Module {
 public:
  explicit Residual(std::unique_ptr<Sequential> body) : body_(std::move(body)) {}

  std::string_view kind() const override { return "Residual"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override { body_->init(rng); }
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override { return body_->forward_flops(in); }

 private:
  std::unique_ptr<Sequential> body_;
};

}  // namespace braid::nn
