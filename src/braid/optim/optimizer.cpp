#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/onebit_adam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"

namespace braid::optim {

Optimizer::Optimizer(std::vector<Segment> segments, int64_t buffer_size)
    : segments_(std::move(segments)), buffer_size_(buffer_size) {
  validate_segments(segments_, buffer_size_);
  // By offset, so the segments inside any range of the buffer are a run of them.
  std::stable_sort(segments_.begin(), segments_.end(),
                   [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
}

Optimizer::~Optimizer() = default;

void Optimizer::step(float* params, const float* grads, float lr) {
  BRAID_CHECK(std::isfinite(lr) && lr >= 0, name(), ": learning rate ", lr,
              " must be finite and >= 0; check the schedule");
  BRAID_CHECK((params && grads) || buffer_size_ == 0, name(),
              ": step() needs parameter and gradient buffers");
  BRAID_CHECK(segments_stepped_ == 0, name(), ": step() during a step in parts (",
              segments_stepped_, " of ", segments_.size(), " segments updated)");
  update(params, grads, lr, steps_ + 1, segments_);
  ++steps_;
}

void Optimizer::step_range(float* params, const float* grads, float lr, int64_t begin,
                           int64_t end) {
  BRAID_CHECK(std::isfinite(lr) && lr >= 0, name(), ": learning rate ", lr,
              " must be finite and >= 0; check the schedule");
  BRAID_CHECK(0 <= begin && begin <= end && end <= buffer_size_, name(), ": range [", begin, ", ",
              end, ") outside the buffer of ", buffer_size_, " floats");
  const auto first = std::lower_bound(
      segments_.begin(), segments_.end(), begin,
      [](const Segment& s, int64_t offset) { return s.offset + s.numel <= offset; });
  auto last = first;
  while (last != segments_.end() && last->offset < end) {
    BRAID_CHECK(last->offset >= begin && last->offset + last->numel <= end, name(), ": range [",
                begin, ", ", end, ") cuts segment '", last->name, "' [", last->offset, ", ",
                last->offset + last->numel, "); a range must hold whole segments");
    ++last;
  }
  if (first == last) return;
  BRAID_CHECK(params && grads, name(), ": step_range() needs parameter and gradient buffers");
  update(params, grads, lr, steps_ + 1, std::span<const Segment>(first, last));
  segments_stepped_ += static_cast<size_t>(last - first);
}

void Optimizer::finish_step() {
  BRAID_CHECK(segments_stepped_ == segments_.size(), name(), ": finish_step() after ",
              segments_stepped_, " segment updates; the step has ", segments_.size());
  segments_stepped_ = 0;
  ++steps_;
}

float* Optimizer::add_state(std::string name) {
  Tensor t = Tensor::empty(Shape{buffer_size_}, DType::f32, MemCategory::optimizer);
  float* data = t.f32();
  state_.emplace_back(std::move(name), std::move(t));
  return data;
}

NamedTensors Optimizer::state() const {
  NamedTensors out = state_;
  Tensor step = Tensor::empty(Shape{}, DType::i64, MemCategory::optimizer);
  *step.data<int64_t>() = steps_;
  out.emplace_back("step", std::move(step));
  return out;
}

namespace {

std::string expected_names(const NamedTensors& expected) {
  std::string out;
  for (const auto& [name, t] : expected) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

void Optimizer::load_state(const NamedTensors& state) {
  // Check everything before copying anything, so a bad checkpoint changes nothing.
  const NamedTensors expected = this->state();
  std::vector<const Tensor*> source(expected.size(), nullptr);
  for (const auto& [name, t] : state) {
    const auto it = std::find_if(expected.begin(), expected.end(),
                                 [&](const auto& e) { return e.first == name; });
    BRAID_CHECK(it != expected.end(), this->name(), ": unexpected optimizer state tensor '", name,
                "' (this optimizer has: ", expected_names(expected),
                "); was the checkpoint written by another optimizer?");
    const size_t k = static_cast<size_t>(it - expected.begin());
    BRAID_CHECK(source[k] == nullptr, this->name(), ": optimizer state tensor '", name,
                "' given twice");
    BRAID_CHECK(t.dtype() == it->second.dtype() && t.shape() == it->second.shape(), this->name(),
                ": optimizer state tensor '", name, "' is ", dtype_name(t.dtype()), t.shape().str(),
                " in the checkpoint but ", dtype_name(it->second.dtype()), it->second.shape().str(),
                " here; the checkpoint was written for another parameter layout or shard");
    source[k] = &t;
  }
  for (size_t k = 0; k < expected.size(); ++k) {
    BRAID_CHECK(source[k] != nullptr, this->name(), ": optimizer state tensor '", expected[k].first,
                "' is missing from the checkpoint");
  }
  const int64_t steps = *source.back()->data<int64_t>();  // "step" is last in state()
  BRAID_CHECK(steps >= 0, this->name(), ": optimizer state 'step' is negative (", steps, ")");
  for (size_t k = 0; k + 1 < expected.size(); ++k) state_[k].second.copy_from(*source[k]);
  steps_ = steps;
}

namespace detail {

void check_non_negative(std::string_view optimizer, std::string_view key, float value) {
  BRAID_CHECK(std::isfinite(value) && value >= 0, optimizer, ": ", key, " = ", value,
              " must be finite and >= 0");
}

void check_unit_interval(std::string_view optimizer, std::string_view key, float value) {
  BRAID_CHECK(value >= 0 && value < 1, optimizer, ": ", key, " = ", value, " must be in [0, 1)");
}

}  // namespace detail

const std::vector<std::string_view>& optimizer_names() {
  static const std::vector<std::string_view> names = {"sgd",     "adam", "adamw", "rmsprop",
                                                      "adagrad", "lars", "lamb",  "onebit_adam"};
  return names;
}

namespace {

float f32(double v) { return static_cast<float>(v); }

// The config's eps, or the optimizer's own default where it is 0 (any other value, a
// negative one too, goes to the optimizer, whose range check names it).
float eps_or(double eps, float fallback) { return eps != 0 ? f32(eps) : fallback; }

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<Segment> segments,
                                          int64_t buffer_size) {
  // Only sgd, rmsprop and lars are given c.momentum: the adaptive ones ignore it.
  if (c.name == "sgd") {
    return std::make_unique<Sgd>(std::move(segments), buffer_size,
                                 SgdOptions{f32(c.momentum), c.nesterov, f32(c.weight_decay)});
  }
  if (c.name == "adam" || c.name == "adamw") {
    const AdamOptions o{f32(c.beta1), f32(c.beta2), eps_or(c.eps, AdamOptions{}.eps),
                        f32(c.weight_decay), c.name == "adamw"};
    return std::make_unique<Adam>(std::move(segments), buffer_size, o);
  }
  if (c.name == "onebit_adam") {  // decoupled decay: optim/onebit_adam.h says why
    const AdamOptions o{f32(c.beta1), f32(c.beta2), eps_or(c.eps, AdamOptions{}.eps),
                        f32(c.weight_decay), true};
    return std::make_unique<OnebitAdam>(std::move(segments), buffer_size,
                                        OnebitAdamOptions{o, c.freeze_step});
  }
  if (c.name == "rmsprop") {
    const RmsPropOptions o{f32(c.alpha), eps_or(c.eps, RmsPropOptions{}.eps), f32(c.momentum),
                           f32(c.weight_decay)};
    return std::make_unique<RmsProp>(std::move(segments), buffer_size, o);
  }
  if (c.name == "adagrad") {
    const AdagradOptions o{eps_or(c.eps, AdagradOptions{}.eps), f32(c.lr_decay),
                           f32(c.initial_accumulator_value), f32(c.weight_decay)};
    return std::make_unique<Adagrad>(std::move(segments), buffer_size, o);
  }
  if (c.name == "lars") {
    return std::make_unique<Lars>(
        std::move(segments), buffer_size,
        LarsOptions{f32(c.momentum), c.nesterov, f32(c.weight_decay), f32(c.trust_coefficient)});
  }
  if (c.name == "lamb") {
    BRAID_CHECK(c.lamb_form == "paper" || c.lamb_form == "deepspeed", "lamb: lamb_form '",
                c.lamb_form, "' is neither 'paper' nor 'deepspeed'");
    const LambOptions o{
        f32(c.beta1),
        f32(c.beta2),
        eps_or(c.eps, LambOptions{}.eps),
        f32(c.weight_decay),
        c.lamb_form == "deepspeed" ? LambOptions::Form::deepspeed : LambOptions::Form::paper,
        c.bias_correction,
        f32(c.min_trust),
        f32(c.max_trust)};
    return std::make_unique<Lamb>(std::move(segments), buffer_size, o);
  }
  std::string names;
  for (std::string_view n : optimizer_names()) (names += names.empty() ? "" : ", ") += n;
  BRAID_THROW(Error, "unknown optimizer '", c.name, "'; accepted: ", names);
}

}  // namespace braid::optim
