#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace braid::optim {

LossScaler::LossScaler(LossScalerConfig config)
    : config_(config), scale_(config.initial_scale), hysteresis_left_(config.hysteresis) {
  BRAID_CHECK(config_.initial_scale > 0 && config_.factor > 1 && config_.window > 0 &&
                  config_.hysteresis >= 1 && config_.min_scale > 0,
              "loss scaler: initial scale and min scale must be > 0, factor > 1, window and "
              "hysteresis >= 1");
}

bool LossScaler::has_overflow(std::span<const float> grads) {
  // A sum is inf or NaN exactly when some term is (finite terms cannot overflow a double's
  // range here), and it vectorises where a per-element test with early exit would not.
  double sum = 0;
  for (const float g : grads) sum += static_cast<double>(g) * 0.0;
  return !std::isfinite(sum);
}

bool LossScaler::update(bool overflow) {
  if (overflow) {
    if (config_.hysteresis == 1 || hysteresis_left_ == 1)
      scale_ = std::max(scale_ / config_.factor, config_.min_scale);
    else
      --hysteresis_left_;
    last_overflow_ = iteration_;
    ++skipped_;
  } else if ((iteration_ - last_overflow_) % config_.window == 0) {
    hysteresis_left_ = config_.hysteresis;
    scale_ *= config_.factor;
  }
  ++iteration_;
  return overflow;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_},
          {"hysteresis_left", hysteresis_left_},
          {"iteration", iteration_},
          {"last_overflow", last_overflow_},
          {"skipped", skipped_}};
}

void LossScaler::load(const nlohmann::json& s, const std::string& source) {
  auto number = [&](const char* key) {
    BRAID_CHECK(s.is_object() && s.contains(key) && s[key].is_number(), source, ": loss_scaler.",
                key, " is missing or not a number");
    return s[key];
  };
  const auto scale = number("scale").get<float>();
  BRAID_CHECK(scale > 0 && std::isfinite(scale), source, ": loss_scaler.scale ", scale,
              " must be a positive finite number");
  scale_ = scale;
  hysteresis_left_ = number("hysteresis_left").get<int>();
  iteration_ = number("iteration").get<int64_t>();
  last_overflow_ = number("last_overflow").get<int64_t>();
  skipped_ = number("skipped").get<int64_t>();
}

}  // namespace braid::optim
