#include "nn/params.h"

#include <algorithm>
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
  stale_.assign(layout_.size(), 0);
}

Tensor ParamSet::param(Id id) const {
  const ParamInfo& p = layout_.at(id);
  return Tensor::view(params() + p.offset, p.shape);
}

Tensor ParamSet::grad(Id id) const {
  const ParamInfo& p = layout_.at(id);
  float* g = grad_data() + p.offset;
  if (stale_[id]) {
    std::memset(g, 0, static_cast<size_t>(p.numel()) * sizeof(float));
    stale_[id] = 0;
  }
  return Tensor::view(g, p.shape);
}

Tensor ParamSet::grad_for_write(Id id, bool& overwrite) const {
  const ParamInfo& p = layout_.at(id);
  overwrite = stale_[id] != 0;
  if (overwrite) {
    stale_[id] = 0;
  }
  return Tensor::view(grad_data() + p.offset, p.shape);
}

float* ParamSet::grads() const { return grads(0, layout_.size()); }

float* ParamSet::grads(Id first, Id end) const {
  BRAID_CHECK(first <= end && end <= layout_.size(), "ParamSet::grads: id range [", first, ", ",
              end, ") outside the ", layout_.size(), " parameters");
  for (Id id = first; id < end; ++id)
    if (stale_[id]) grad(id);
  return grad_data();
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

void ParamSet::zero_grads() { std::fill(stale_.begin(), stale_.end(), uint8_t{1}); }

}  // namespace braid::nn
