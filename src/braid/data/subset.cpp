// Index translation in fixed chunks on the stack, so fill() needs no scratch allocation
// (and stays thread-compatible: nothing mutable is shared).
#include "data/subset.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace braid::data {
namespace {

constexpr size_t kChunk = 128;

}  // namespace

SubsetSource::SubsetSource(std::shared_ptr<const Source> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  BRAID_CHECK(base_ != nullptr, "SubsetSource needs a base source");
  const int64_t n = base_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    BRAID_CHECK(indices_[i] >= 0 && indices_[i] < n, "subset index ", i, " is ", indices_[i],
                " but the ", base_->kind(), " source has ", n, " samples (0..", n - 1, ")");
}

void SubsetSource::fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
                        Tensor& targets) const {
  std::array<SampleRef, kChunk> refs;
  for (size_t begin = 0; begin < samples.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, samples.size() - begin);
    for (size_t j = 0; j < n; ++j) {
      const SampleRef& s = samples[begin + j];
      BRAID_CHECK(s.index >= 0 && s.index < size(), "sample ", s.index, " of a subset of ", size());
      refs[j] = {indices_[static_cast<size_t>(s.index)], s.position};
    }
    const auto b = static_cast<int64_t>(begin), e = static_cast<int64_t>(begin + n);
    if (b == 0 && e == inputs.dim(0)) {
      base_->fill(std::span<const SampleRef>(refs.data(), n), ctx, inputs, targets);
    } else {
      Tensor in = inputs.slice_rows(b, e), tg = targets.slice_rows(b, e);
      base_->fill(std::span<const SampleRef>(refs.data(), n), ctx, in, tg);
    }
  }
}

}  // namespace braid::data
