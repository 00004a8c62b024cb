#include "nn/params.h"

#include <cstring>

namespace braid::nn {

ParamSet::Id ParamSet::declare(std::string name, Shape shape, bool decay) {
  BRAID_CHECK(!frozen_, "parameter '", name, "' declared after the buffers were allocated");
  BRAID_CHECK(find(name) < 0, "parameter '", name, "' declared twice");
  ParamInfo info{std::move(name), shape, total_, decay};
  total_ += (shape.numel() + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  layout_.push_back(std::move(info));
  return layout_.size() - 1;
}

void ParamSet::declare_buffer(std::string name, Tensor value) {
  for (const auto& b : buffers_) BRAID_CHECK(b.name != name, "buffer '", name, "' declared twice");
  buffers_.push_back({std::move(name), std::move(value)});
}

void ParamSet::allocate() {
  BRAID_CHECK(!frozen_, "ParamSet::allocate called twice");
  frozen_ = true;
  params_ = Buffer(static_cast<size_t>(total_) * sizeof(float), MemCategory::parameters);
  grads_ = Buffer(static_cast<size_t>(total_) * sizeof(float), MemCategory::gradients);
}

Tensor ParamSet::param(Id id) const {
  const ParamInfo& p = layout_.at(id);
  return Tensor::view(params() + p.offset, p.shape);
}

Tensor ParamSet::grad(Id id) const {
  const ParamInfo& p = layout_.at(id);
  return Tensor::view(grads() + p.offset, p.shape);
}

int64_t ParamSet::find(const std::string& name) const {
  for (size_t i = 0; i < layout_.size(); ++i)
    if (layout_[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

int64_t ParamSet::count() const {
  int64_t n = 0;
  for (const auto& p : layout_) n += p.numel();
  return n;
}

void ParamSet::zero_grads() {
  if (total_) std::memset(grads(), 0, static_cast<size_t>(total_) * sizeof(float));
}

}  // namespace braid::nn
