#include "train/weight_average.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "train/checkpoint.h"

namespace braid::train {
namespace {

// avg += rate * (x - avg), the form torch's lerp_ uses: one rounding per element.
void fold(float* __restrict avg, const float* __restrict x, int64_t n, float rate) {
  for (int64_t i = 0; i < n; ++i) avg[i] += rate * (x[i] - avg[i]);
}

void swap_bytes(const Tensor& a, const Tensor& b) {
  std::swap_ranges(static_cast<unsigned char*>(a.raw()),
                   static_cast<unsigned char*>(a.raw()) + a.nbytes(),
                   static_cast<unsigned char*>(b.raw()));
}

}  // namespace

WeightAverage::WeightAverage(const nn::ParamSet& params, double decay) : decay_(decay) {
  BRAID_CHECK(decay > 0 && decay < 1, "weight average: decay must be in (0, 1), got ", decay);
  BRAID_CHECK(params.allocated(), "weight average of a ParamSet that is not allocated yet");
  flat_ = Tensor::empty(Shape{params.size()}, DType::f32, MemCategory::optimizer);
  if (params.size() > 0)
    std::memcpy(flat_.raw(), params.params(), static_cast<size_t>(params.size()) * sizeof(float));
  for (nn::ParamSet::Id id = 0; id < params.layout().size(); ++id) {
    const nn::ParamInfo& p = params.info(id);
    state_.push_back({p.name, Tensor::view(flat_.f32() + p.offset, p.shape)});
  }
  param_count_ = state_.size();
  for (const nn::NamedBuffer& b : params.buffers()) {
    Tensor copy = Tensor::empty(b.value.shape(), b.value.dtype(), MemCategory::optimizer);
    copy.copy_from(b.value);
    state_.push_back({b.name, std::move(copy)});
  }
}

void WeightAverage::update(const nn::ParamSet& params) {
  const double n = static_cast<double>(updates_);
  const auto rate = static_cast<float>(1.0 - std::min(decay_, (1.0 + n) / (10.0 + n)));
  fold(flat_.f32(), params.params(), params.size(), rate);
  for (size_t i = param_count_; i < state_.size(); ++i) {
    Tensor& avg = state_[i].tensor;
    const Tensor& live = params.buffers()[i - param_count_].value;
    if (avg.dtype() == DType::f32)
      fold(avg.f32(), live.f32(), avg.numel(), rate);
    else
      avg.copy_from(live);  // counters such as num_batches_tracked follow the model
  }
  ++updates_;
}

void WeightAverage::swap_with(nn::ParamSet& params) {
  if (params.size() > 0) swap_bytes(flat_, Tensor::view(params.params(), Shape{params.size()}));
  for (size_t i = param_count_; i < state_.size(); ++i)
    swap_bytes(state_[i].tensor, params.buffers()[i - param_count_].value);
}

void WeightAverage::load(const std::vector<NamedTensor>& tensors, int64_t updates,
                         const std::string& source) {
  BRAID_CHECK(updates >= 0, source, ": the weight average's update count is negative (", updates,
              ")");
  copy_named_tensors(tensors, state_, source);
  updates_ = updates;
}

}  // namespace braid::train
