#include "parallel/strategy.h"

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
}

Strategy::~Strategy() = default;

void Strategy::declare() {
  if (declared_) return;
  module_->declare(params_, "");
  declared_ = true;
}

void Strategy::build(const nn::FlatAllocator& allocator) {
  declare();
  params_.allocate(allocator);
  Rng init_rng(options_.seed, kInitStream);
  module_->init(init_rng);
  cache_ = module_->make_cache();
  optimizer_ = optim::make_optimizer(options_.optimizer, segments_of(params_), params_.size());
}

nn::ForwardContext Strategy::forward_context(int64_t step, int64_t micro) const {
  Rng rng = Rng(options_.seed, kForwardStream, 0).fork(static_cast<uint64_t>(step));
  if (micro > 0) rng = rng.fork(static_cast<uint64_t>(micro));
  return {nn::Mode::train, rng};
}

}  // namespace braid::parallel
