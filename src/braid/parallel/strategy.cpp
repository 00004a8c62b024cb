#include "parallel/strategy.h"

#include "core/timer.h"
#include "data/loader.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {
namespace {

// Streams of the counter-based RNG, as the trainer always used them: one purpose each.
constexpr uint64_t kInitStream = 1;
constexpr uint64_t kForwardStream = 2;

std::vector<optim::Segment> segments_of(const nn::ParamSet& params) {
  std::vector<optim::Segment> out;
  for (const auto& p : params.layout()) out.push_back({p.name, p.offset, p.numel(), p.decay});
  return out;
}

}  // namespace

Strategy::Strategy(std::unique_ptr<nn::Module> module, StepOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  BRAID_CHECK(module_, "a strategy needs a model");
  BRAID_CHECK(options_.accumulate_steps >= 1, "accumulate_steps must be >= 1, got ",
              options_.accumulate_steps);
  if (options_.loss_scaling) scaler_.emplace(*options_.loss_scaling);
}

Strategy::~Strategy() = default;

void Strategy::cut_shard(StateShard& into) const {
  (void)into;
  BRAID_THROW(Error, "strategy ", name(),
              " holds its state whole on every rank: it has no shard to cut");
}

void Strategy::pass_shard_on(const StateShard& mine, StateShard& from_left) {
  (void)mine;
  (void)from_left;
  BRAID_THROW(Error, "strategy ", name(),
              " holds its state whole on every rank: it passes no shard on");
}

void Strategy::declare() {
  if (declared_) return;
  module_->declare(params_, "");
  declared_ = true;
}

optim::Optimizer& Strategy::optimizer() {
  BRAID_CHECK(optimizer_, "strategy ", name(),
              " holds no optimizer over every parameter (each rank keeps its share)");
  return *optimizer_;
}

const optim::Optimizer& Strategy::optimizer() const {
  BRAID_CHECK(optimizer_, "strategy ", name(),
              " holds no optimizer over every parameter (each rank keeps its share)");
  return *optimizer_;
}

void Strategy::build(const nn::FlatAllocator& allocator, bool with_optimizer) {
  declare();
  params_.allocate(allocator);
  Rng init_rng(options_.seed, kInitStream);
  module_->init(init_rng);
  cache_ = module_->make_cache();
  if (with_optimizer)
    optimizer_ = optim::make_optimizer(options_.optimizer, segments_of(params_), params_.size());
  params_.add_ready_listener([this](int64_t begin, int64_t end) {
    if (!timeline_ || !timeline_->enabled()) return;
    // Backward from the previous report to this one produced this range: a layer's span.
    const int64_t now = Timeline::now();
    timeline_->record(TimelineLane::kCompute, "backward", last_ready_ns_, now,
                      {"first_float", begin}, {"floats", end - begin});
    last_ready_ns_ = now;
  });
}

double Strategy::forward_loss(const data::Batch& b, int64_t step, int64_t micro, float grad_scale) {
  Stopwatch watch;
  const int64_t t0 = timeline_ ? Timeline::now() : 0;
  const Tensor& logits = module_->forward(b.inputs, *cache_, train_context(step, micro));
  const float scale = scaler_ ? grad_scale * scaler_->scale() : grad_scale;
  const double loss = options_.loss
                          ? options_.loss->compute(logits, b.targets, &dlogits_, scale).loss
                          : nn::softmax_cross_entropy(
                                logits, b.targets, &dlogits_,
                                {.grad_scale = scale, .label_smoothing = options_.label_smoothing})
                                .loss;
  times_.forward += watch.elapsed();
  if (timeline_) {
    last_ready_ns_ = Timeline::now();
    timeline_->record(TimelineLane::kCompute, "forward", t0, last_ready_ns_,
                      {"micro_batch", micro});
  }
  return loss;
}

nn::ForwardContext Strategy::train_context(int64_t step, int64_t micro) const {
  Rng rng = Rng(options_.seed, kForwardStream, 0).fork(static_cast<uint64_t>(step));
  if (micro > 0) rng = rng.fork(static_cast<uint64_t>(micro));
  return {nn::Mode::train, rng, options_.precision};
}

void Strategy::backward() {
  Stopwatch watch;
  params_.begin_backward();
  module_->backward(dlogits_, *cache_, /*need_dx=*/false);
  params_.finish_backward();
  times_.backward += watch.elapsed();
}

double Strategy::accumulate_micro_batches(const MicroBatches& micro, int64_t step, int rank,
                                          int ranks) {
  const int m = micro.size();
  const float scale = m > 1 ? 1.0f / static_cast<float>(m) : 1.0f;
  params_.zero_grads();
  double loss_sum = 0;
  for (int k = 0; k < m; ++k) {
    loss_sum += forward_loss(micro[k], step, rank + int64_t{ranks} * k, scale);
    backward();
  }
  return loss_sum / m;
}

void Strategy::clip_and_step(float lr) {
  if (scaler_) {
    float* grads = params_.grads();
    const float scale = scaler_->scale();  // what this step's gradients were computed at
    const bool overflow =
        optim::LossScaler::has_overflow({grads, static_cast<size_t>(params_.size())});
    if (scaler_->update(overflow)) return;  // skipped: the weights never see the inf
    scale_into(grads, grads, params_.size(), 1.0f / scale);
  }
  if (options_.clip_grad_norm > 0)
    optim::clip_grad_norm(params_.grads(), optimizer_->segments(), options_.clip_grad_norm);
  optimizer_->step(params_.params(), params_.grads(), lr);
}

}  // namespace braid::parallel
