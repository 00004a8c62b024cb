#include "parallel/tensor_shards.h"

#include <cstring>
#include <string_view>

namespace braid::parallel {

struct TensorShards::Shard {
  enum Kind { whole, rows, cols };
  nn::ParamSet::Id local = 0, full = 0;
  Kind kind = whole;
  int64_t rows_n = 1, cols_n = 1;  // the full tensor as [rows, cols] (a vector: cols 1)
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first, count) along the cut dimension
};

namespace {}  // namespace

TensorShards::TensorShards(std::unique_ptr<nn::Module> model, const std::vector<nn::WidthCut>& cuts,
                           const nn::ParamSet& full, int rank)
    : full_(full), rank_(rank), model_(std::move(model)) {
  model_->declare(params_, "");
  params_.allocate();
  for (nn::ParamSet::Id id = 0; id < params_.layout().size(); ++id) {
    const nn::ParamInfo& p = params_.info(id);
    const int64_t at = full.find(p.name);
    BRAID_CHECK(at >= 0, "tensor parallel: no parameter '", p.name, "' in the full model");
    Shard s;
    s.local = id;
    s.full = static_cast<nn::ParamSet::Id>(at);
    const Shape& fs = full.info(s.full).shape;
    s.rows_n = fs[0];
    s.cols_n = fs.numel() / fs[0];
    for (const nn::WidthCut& c : cuts)
      if (c.name == p.name) {
        s.kind = c.columns ? Shard::cols : Shard::rows;
        s.runs = c.runs;
      }
    int64_t cut = 0;
    for (const auto& r : s.runs) cut += r.second;
    const int64_t expect = s.kind == Shard::whole  ? fs.numel()
                           : s.kind == Shard::rows ? cut * s.cols_n
                                                   : s.rows_n * cut;
    BRAID_CHECK(expect == p.numel(), "tensor parallel: '", p.name, "' holds ", p.numel(),
                " values here but its shard of ", fs.str(), " has ", expect);
    shards_.push_back(std::move(s));
  }
}

TensorShards::~TensorShards() = default;

bool TensorShards::is_cut(nn::ParamSet::Id id) const { return shards_[id].kind != Shard::whole; }

void TensorShards::to_local(const float* full, float* local) const {
  for (const Shard& s : shards_) {
    const float* src = full + full_.info(s.full).offset;
    float* dst = local + params_.info(s.local).offset;
    if (s.kind == Shard::whole) {
      std::memcpy(dst, src, static_cast<size_t>(full_.info(s.full).numel()) * sizeof(float));
    } else if (s.kind == Shard::rows) {
      for (const auto& [first, count] : s.runs) {
        std::memcpy(dst, src + first * s.cols_n, static_cast<size_t>(count * s.cols_n) * 4);
        dst += count * s.cols_n;
      }
    } else {
      const int64_t width = params_.info(s.local).numel() / s.rows_n;
      for (int64_t r = 0; r < s.rows_n; ++r) {
        int64_t at = 0;
        for (const auto& [first, count] : s.runs) {
          std::memcpy(dst + r * width + at, src + r * s.cols_n + first,
                      static_cast<size_t>(count) * 4);
          at += count;
        }
      }
    }
  }
}

void TensorShards::to_full(const float* local, float* full) const {
  for (const Shard& s : shards_) {
    const float* src = local + params_.info(s.local).offset;
    float* dst = full + full_.info(s.full).offset;
    if (s.kind == Shard::whole) {
      if (rank_ == 0)
        std::memcpy(dst, src, static_cast<size_t>(full_.info(s.full).numel()) * sizeof(float));
    } else if (s.kind == Shard::rows) {
      for (const auto& [at, count] : s.runs) {
        std::memcpy(dst + at * s.cols_n, src, static_cast<size_t>(count * s.cols_n) * 4);
        src += count * s.cols_n;
      }
    } else {
      const int64_t width = params_.info(s.local).numel() / s.rows_n;
      for (int64_t r = 0; r < s.rows_n; ++r) {
        int64_t at = 0;
        for (const auto& [first, count] : s.runs) {
          std::memcpy(dst + r * s.cols_n + first, src + r * width + at,
                      static_cast<size_t>(count) * 4);
          at += count;
        }
      }
    }
  }
}

}  // namespace braid::parallel
