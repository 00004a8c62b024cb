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

void ParamSet::allocate(const FlatAllocator& allocator) {
  BRAID_CHECK(!frozen_, "ParamSet::allocate called twice");
  frozen_ = true;
  const size_t bytes = static_cast<size_t>(total_) * sizeof(float);
  // With a locator the gradients live elsewhere: no flat buffer for them.
  const size_t grad_bytes = grad_locator_ ? 0 : bytes;
  const size_t param_bytes = param_locator_.at ? 0 : bytes;
  if (allocator) {
    FlatMemory p = param_bytes ? allocator(param_bytes, MemCategory::parameters) : FlatMemory{};
    FlatMemory g = grad_bytes ? allocator(grad_bytes, MemCategory::gradients) : FlatMemory{};
    BRAID_CHECK(((p.data || !param_bytes) && (g.data || !grad_bytes)) || bytes == 0,
                "ParamSet::allocate: the allocator returned no "
                "memory for ",
                bytes, " bytes");
    params_ptr_ = p.data;
    grads_ptr_ = g.data;
    params_owner_ = std::move(p.owner);
    grads_owner_ = std::move(g.owner);
  } else {
    params_ = Buffer(param_bytes, MemCategory::parameters);
    grads_ = Buffer(grad_bytes, MemCategory::gradients);
    params_ptr_ = static_cast<float*>(params_.data());
    grads_ptr_ = static_cast<float*>(grads_.data());
  }
  stale_.assign(layout_.size(), 0);
  ready_.assign(layout_.size(), 0);
}

void ParamSet::set_param_locator(ParamLocator locator) {
  BRAID_CHECK(!frozen_, "ParamSet::set_param_locator after allocate()");
  param_locator_ = std::move(locator);
}

void ParamSet::set_grad_locator(GradLocator locator) {
  BRAID_CHECK(!frozen_, "ParamSet::set_grad_locator after allocate()");
  grad_locator_ = std::move(locator);
}

float* ParamSet::grad_at(Id id) const {
  return grad_locator_ ? grad_locator_(id) : grads_ptr_ + layout_[id].offset;
}

int64_t ParamSet::range_begin(Id first) const {
  return first < layout_.size() ? layout_[first].offset : total_;
}

int64_t ParamSet::range_end(Id end) const {
  return end < layout_.size() ? layout_[end].offset : total_;
}

size_t ParamSet::add_ready_listener(ReadyListener listener) {
  listeners_.push_back(std::move(listener));
  return listeners_.size() - 1;
}

void ParamSet::remove_ready_listener(size_t id) {
  BRAID_CHECK(id < listeners_.size(), "ParamSet: no ready listener ", id);
  listeners_[id] = nullptr;
}

void ParamSet::begin_backward() {
  std::fill(ready_.begin(), ready_.end(), uint8_t{0});
  in_backward_ = true;
}

void ParamSet::mark_ready(Id first, Id end) {
  BRAID_CHECK(first <= end && end <= layout_.size(), "ParamSet::mark_ready: id range [", first,
              ", ", end, ") outside the ", layout_.size(), " parameters");
  if (first == end || !in_backward_) return;
  for (Id id = first; id < end; ++id) {
    BRAID_CHECK(!ready_[id], "parameter '", layout_[id].name,
                "' reported final twice in one backward");
    ready_[id] = 1;
    if (stale_[id]) grad(id);
  }
  const int64_t begin = range_begin(first), stop = range_end(end);
  for (const auto& l : listeners_)
    if (l) l(begin, stop);
}

void ParamSet::finish_backward() {
  if (!in_backward_) return;
  for (Id end = layout_.size(); end > 0;) {
    if (ready_[end - 1]) {
      --end;
      continue;
    }
    Id first = end - 1;
    while (first > 0 && !ready_[first - 1]) --first;
    mark_ready(first, end);
    end = first;
  }
  in_backward_ = false;
}

Tensor ParamSet::param(Id id) const {
  const ParamInfo& p = layout_.at(id);
  if (param_locator_.at) return Tensor::view(param_locator_.at(id), p.shape);
  return Tensor::view(params_ptr_ + p.offset, p.shape);
}

Tensor ParamSet::grad(Id id) const {
  const ParamInfo& p = layout_.at(id);
  float* g = grad_at(id);
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
  return Tensor::view(grad_at(id), p.shape);
}

float* ParamSet::grads() const { return grads(0, layout_.size()); }

float* ParamSet::grads(Id first, Id end) const {
  BRAID_CHECK(first <= end && end <= layout_.size(), "ParamSet::grads: id range [", first, ", ",
              end, ") outside the ", layout_.size(), " parameters");
  BRAID_CHECK(!grad_locator_,
              "ParamSet::grads: the gradients live outside a flat buffer here "
              "(a grad locator, ZeRO stage 2); ask grad(id)");
  for (Id id = first; id < end; ++id)
    if (stale_[id]) grad(id);
  return grads_ptr_;
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

void ParamSet::zero_grads(Id first, Id end) {
  std::fill(stale_.begin() + static_cast<std::ptrdiff_t>(first),
            stale_.begin() + static_cast<std::ptrdiff_t>(end), uint8_t{1});
}

}  // namespace braid::nn
