#include "parallel/tensor_parallel.h"

#include <cmath>
#include <cstring>

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/kernels.h"
#include "core/timer.h"
#include "data/loader.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "parallel/same_model.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {

struct TensorParallel::Shard {
  enum Kind { whole, rows, cols };
  nn::ParamSet::Id local = 0, full = 0;
  Kind kind = whole;
  int64_t rows_n = 1, cols_n = 1;  // the full tensor as [rows, cols] (a vector: cols 1)
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first, count) along the cut dimension
};

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<optim::Segment> segments_of(const nn::ParamSet& params) {
  std::vector<optim::Segment> out;
  for (const auto& p : params.layout()) out.push_back({p.name, p.offset, p.numel(), p.decay});
  return out;
}

}  // namespace

TensorParallel::TensorParallel(std::unique_ptr<nn::Module> module, StepOptions options,
                               std::shared_ptr<comm::Group> group)
    : Strategy(std::move(module), std::move(options)), group_(group), reducer_(group) {
  const auto* gpt = dynamic_cast<const nn::Gpt*>(module_.get());
  BRAID_CHECK(gpt != nullptr, "tensor parallel: model '", module_->kind(),
              "' is not a GPT; tensor_parallel cuts the GPT's attention, MLP and vocabulary "
              "(width-split Sequential models are not built yet)");
  BRAID_CHECK(options_.label_smoothing == 0,
              "tensor parallel: label smoothing is not built for the vocabulary-parallel loss; "
              "drop label_smoothing");
  const nn::GptConfig c = gpt->config();
  // The full model exists for evaluation and checkpoints only: it never runs backward.
  declare();
  params_.set_grad_locator([](size_t) -> float* {
    BRAID_THROW(Error, "tensor parallel: the full model has no gradients (each rank trains "
                       "its shard of it)");
  });
  build(nullptr, /*with_optimizer=*/false);
  check_same_model(*group_, params_, "tensor parallel");
  local_ = std::make_unique<nn::TensorParallelGpt>(c, reducer_);
  local_->declare(local_params_, "");
  local_params_.allocate();
  local_cache_ = local_->make_cache();

  const int T = group_->size(), t = group_->rank();
  const int64_t D = c.d_model, W = D / T, F = c.mlp_ratio * D / T, V = c.vocab / T;
  for (nn::ParamSet::Id id = 0; id < local_params_.layout().size(); ++id) {
    const nn::ParamInfo& p = local_params_.info(id);
    const int64_t full = params_.find(p.name);
    BRAID_CHECK(full >= 0, "tensor parallel: no parameter '", p.name, "' in the full model");
    Shard s;
    s.local = id;
    s.full = static_cast<nn::ParamSet::Id>(full);
    const Shape& fs = params_.info(s.full).shape;
    s.rows_n = fs[0];
    s.cols_n = fs.numel() / fs[0];
    const std::string& n = p.name;
    if (ends_with(n, "attn.c_attn.weight") || ends_with(n, "attn.c_attn.bias")) {
      s.kind = Shard::rows;
      for (int j = 0; j < 3; ++j) s.runs.emplace_back(j * D + t * W, W);  // q, k, v
    } else if (ends_with(n, "attn.c_proj.weight")) {
      s.kind = Shard::cols;
      s.runs.emplace_back(t * W, W);
    } else if (ends_with(n, "mlp.c_fc.weight") || ends_with(n, "mlp.c_fc.bias")) {
      s.kind = Shard::rows;
      s.runs.emplace_back(t * F, F);
    } else if (ends_with(n, "mlp.c_proj.weight")) {
      s.kind = Shard::cols;
      s.runs.emplace_back(t * F, F);
    } else if (n == "wte.weight") {
      s.kind = Shard::rows;
      s.runs.emplace_back(t * V, V);
    }
    int64_t cut = 0;
    for (const auto& r : s.runs) cut += r.second;
    const int64_t expect = s.kind == Shard::whole  ? fs.numel()
                           : s.kind == Shard::rows ? cut * s.cols_n
                                                   : s.rows_n * cut;
    BRAID_CHECK(expect == p.numel(), "tensor parallel: '", n, "' holds ", p.numel(),
                " values here but its shard of ", fs.str(), " has ", expect);
    shards_.push_back(std::move(s));
  }
  std::vector<optim::Segment> all = segments_of(local_params_);
  for (size_t i = 0; i < shards_.size(); ++i)
    if (shards_[i].kind != Shard::whole || t == 0) norm_segments_.push_back(all[i]);
  local_optimizer_ = optim::make_optimizer(options_.optimizer, all, local_params_.size());
  to_local(params_.params(), local_params_.params());
}

TensorParallel::~TensorParallel() = default;

int TensorParallel::rank() const { return group_->rank(); }
int TensorParallel::world_size() const { return group_->size(); }

void TensorParallel::to_local(const float* full, float* local) const {
  for (const Shard& s : shards_) {
    const float* src = full + params_.info(s.full).offset;
    float* dst = local + local_params_.info(s.local).offset;
    if (s.kind == Shard::whole) {
      std::memcpy(dst, src, static_cast<size_t>(params_.info(s.full).numel()) * sizeof(float));
    } else if (s.kind == Shard::rows) {
      for (const auto& [first, count] : s.runs) {
        std::memcpy(dst, src + first * s.cols_n, static_cast<size_t>(count * s.cols_n) * 4);
        dst += count * s.cols_n;
      }
    } else {
      const int64_t width = local_params_.info(s.local).numel() / s.rows_n;
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

void TensorParallel::to_full(const float* local, float* full) const {
  const bool first = group_->rank() == 0;
  for (const Shard& s : shards_) {
    const float* src = local + local_params_.info(s.local).offset;
    float* dst = full + params_.info(s.full).offset;
    if (s.kind == Shard::whole) {
      if (first)
        std::memcpy(dst, src, static_cast<size_t>(params_.info(s.full).numel()) * sizeof(float));
    } else if (s.kind == Shard::rows) {
      for (const auto& [at, count] : s.runs) {
        std::memcpy(dst + at * s.cols_n, src, static_cast<size_t>(count * s.cols_n) * 4);
        src += count * s.cols_n;
      }
    } else {
      const int64_t width = local_params_.info(s.local).numel() / s.rows_n;
      for (int64_t r = 0; r < s.rows_n; ++r) {
        int64_t at = 0;
        for (const auto& [first_col, count] : s.runs) {
          std::memcpy(dst + r * s.cols_n + first_col, src + r * width + at,
                      static_cast<size_t>(count) * 4);
          at += count;
        }
      }
    }
  }
}

void TensorParallel::assemble(const float* local, float* full) {
  fill(0.0f, full, params_.size());
  to_full(local, full);
  comm::allreduce(*group_, full, static_cast<size_t>(params_.size()), DType::f32, ReduceOp::sum);
}

double TensorParallel::step(const data::Batch& batch, float lr, int64_t step) {
  Stopwatch watch;
  times_ = {};
  reducer_.reset_seconds();
  const int m = options_.accumulate_steps;
  micro_.split(batch, m);
  const float scale = (m > 1 ? 1.0f / static_cast<float>(m) : 1.0f) *
                      (scaler_ ? scaler_->scale() : 1.0f);
  local_params_.zero_grads();
  double loss_sum = 0;
  for (int k = 0; k < m; ++k) {
    const Tensor& logits =
        local_->forward(micro_[k].inputs, *local_cache_, train_context(step, k));
    loss_sum += nn::vocab_parallel_cross_entropy(logits, micro_[k].targets, local_->first_class(),
                                                 local_->config().vocab, reducer_,
                                                 &dlogits_local_, loss_work_, {.grad_scale = scale})
                    .loss;
    times_.forward += watch.lap();
    local_->backward(dlogits_local_, *local_cache_, false);
    times_.backward += watch.lap();
  }
  float* grads = local_params_.grads();
  const size_t n = static_cast<size_t>(local_params_.size());
  bool skip = false;
  if (scaler_) {
    double overflow = optim::LossScaler::has_overflow({grads, n}) ? 1 : 0;
    comm::allreduce(*group_, &overflow, 1, DType::f64, ReduceOp::sum);
    const float at = scaler_->scale();
    skip = scaler_->update(overflow > 0);
    if (!skip) scale_into(grads, grads, local_params_.size(), 1.0f / at);
  }
  if (!skip) {
    if (options_.clip_grad_norm > 0) {
      double sq = optim::grad_sum_squares(grads, norm_segments_);
      comm::allreduce(*group_, &sq, 1, DType::f64, ReduceOp::sum);
      optim::scale_grads(grads, local_optimizer_->segments(),
                         optim::clip_coefficient(std::sqrt(sq), options_.clip_grad_norm));
    }
    local_optimizer_->step(local_params_.params(), grads, lr);
    full_current_ = false;
  }
  times_.optimizer = watch.lap();
  times_.communication_exposed = reducer_.seconds();
  times_.total = times_.forward + times_.backward + times_.optimizer;
  return loss_sum / m;
}

void TensorParallel::synchronize() {
  if (full_current_) return;
  assemble(local_params_.params(), params_.params());
  full_current_ = true;
}

void TensorParallel::sync_parameters() {
  comm::broadcast(*group_, params_.params(), static_cast<size_t>(params_.size()), DType::f32, 0);
  to_local(params_.params(), local_params_.params());
  full_current_ = true;
}

void TensorParallel::sum_over_ranks(double* values, size_t count, const char* what) {
  (void)what;
  comm::allreduce(*group_, values, count, DType::f64, ReduceOp::sum);
}

void TensorParallel::start_sum_over_ranks(double* values, size_t count, const char* what) {
  sum_over_ranks(values, count, what);
}

std::string_view TensorParallel::optimizer_name() const { return local_optimizer_->name(); }

void TensorParallel::gather_for_checkpoint() {
  gathered_.clear();
  for (const auto& [name, t] : local_optimizer_->state()) {
    if (t.dtype() != DType::f32) {
      gathered_.emplace_back(name, t);
      continue;
    }
    Tensor full = Tensor::empty({params_.size()}, DType::f32, MemCategory::optimizer);
    assemble(t.f32(), full.f32());
    gathered_.emplace_back(name, full);
  }
}

optim::NamedTensors TensorParallel::optimizer_state() const {
  BRAID_CHECK(!gathered_.empty(),
              "tensor parallel: the full optimizer state is gathered by gather_for_checkpoint()");
  return gathered_;
}

void TensorParallel::load_optimizer_state(const optim::NamedTensors& state) {
  optim::NamedTensors local;
  for (const auto& [name, t] : state) {
    if (t.dtype() != DType::f32) {
      local.emplace_back(name, t);
      continue;
    }
    BRAID_CHECK(t.numel() == params_.size(), "optimizer state '", name, "' holds ", t.numel(),
                " floats; this model's layout has ", params_.size());
    Tensor mine = Tensor::empty({local_params_.size()}, DType::f32, MemCategory::optimizer);
    to_local(t.f32(), mine.f32());
    local.emplace_back(name, mine);
  }
  local_optimizer_->load_state(local);
}

}  // namespace braid::parallel
