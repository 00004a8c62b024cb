// Sequential: children applied in order, named like torch.nn.Sequential ("0.", "1.", ...,
// activations included in the numbering).
#pragma once

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
  // After each child's backward the parameters it declared are final (no parameter is
  // shared between children): reported at once, so an optimizer or a bucket's allreduce
  // can start on them while backward goes on.
  bool reports_ready() const override { return true; }
  // Each child's parameters are announced before its forward.
  bool announces_use() const override { return true; }
  // One unit per child.
  std::vector<PipelineUnit> pipeline_units() override;

 private:
  std::vector<std::unique_ptr<Module>> children_;
  std::vector<std::pair<ParamSet::Id, ParamSet::Id>> child_params_;  // from declare()
  std::vector<std::pair<size_t, size_t>> child_buffers_;             // from declare()
  ParamSet* params_ = nullptr;
  // Children up to and including this one need no input gradient unless the caller asks
  // for one: nothing before them learns (mlp's Linear after Flatten). Until declare()
  // runs, every child but the first computes one.
  size_t first_with_params_ = 0;
};

// Residual: y = x + body(x). Body children are named "<prefix>body.<i>.".
// x + body(x), or body(x) + shortcut(x) with a shortcut (a projection where the body changes
// the shape: ResNet's strided 1x1 convolution and batch norm). Parameters are named
// "body." and "shortcut.".
class Residual : public Module {
 public:
  explicit Residual(std::unique_ptr<Sequential> body, std::unique_ptr<Sequential> shortcut = {})
      : body_(std::move(body)), shortcut_(std::move(shortcut)) {}

  std::string_view kind() const override { return "Residual"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override {
    body_->init(rng);
    if (shortcut_) shortcut_->init(rng);
  }
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override {
    return body_->forward_flops(in) + (shortcut_ ? shortcut_->forward_flops(in) : 0);
  }
  bool reports_ready() const override { return true; }  // its body and shortcut do
  bool announces_use() const override { return true; }  // its body and shortcut do

 private:
  std::unique_ptr<Sequential> body_, shortcut_;
};

}  // namespace braid::nn
