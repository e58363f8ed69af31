#include "pipetrain/optim/loss_scaler.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "pipetrain/io/errors.h"

namespace pipetrain::optim {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config),
      dynamic_(config.loss_scale == 0),
      scale_(dynamic_ ? std::ldexp(1.0, static_cast<int>(config.initial_scale_power))
                      : config.loss_scale),
      hysteresis_left_(config.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (overflow) {
    ++skipped_;
    if (dynamic_) {
      if (hysteresis_left_ <= 1) {
        if (scale_ / 2 < config_.min_loss_scale) {
          throw std::runtime_error("gradients overflow even at loss scale " +
                                   std::to_string(scale_) +
                                   "; halving it would go below fp16.min_loss_scale " +
                                   std::to_string(config_.min_loss_scale));
        }
        scale_ /= 2;
      } else {
        --hysteresis_left_;
      }
    }
    last_overflow_ = steps_;
  } else if (dynamic_ && (steps_ - last_overflow_) % config_.window == 0) {
    scale_ *= 2;
    hysteresis_left_ = config_.hysteresis;
  }
  ++steps_;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_},
          {"hysteresis_left", hysteresis_left_},
          {"steps", steps_},
          {"last_overflow", last_overflow_},
          {"skipped", skipped_}};
}

void LossScaler::restore(const nlohmann::json& state) {
  try {
    scale_ = state.at("scale").get<double>();
    hysteresis_left_ = state.at("hysteresis_left").get<int64_t>();
    steps_ = state.at("steps").get<int64_t>();
    last_overflow_ = state.at("last_overflow").get<int64_t>();
    skipped_ = state.at("skipped").get<int64_t>();
  } catch (const std::exception&) {
    throw io::InputError("checkpoint loss_scaler state is malformed: " + state.dump());
  }
}

}  // namespace pipetrain::optim
