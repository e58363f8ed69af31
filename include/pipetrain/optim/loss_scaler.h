#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace pipetrain::optim {

// fp16 loss scaling with DeepSpeed's semantics. Dynamic (loss_scale 0): start at
// 2^initial_scale_power; after an overflow the scale halves once `hysteresis` overflows
// have been seen; after `window` clean steps since the last overflow it doubles. A
// positive loss_scale is static. Overflowing steps are skipped either way.
struct LossScalerConfig {
  double loss_scale = 0;
  int64_t initial_scale_power = 16;
  int64_t window = 1000;
  int64_t hysteresis = 2;
  double min_loss_scale = 1;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  double scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }

  // One step's verdict, the same on every rank. Throws std::runtime_error when the scale
  // would have to fall below min_loss_scale.
  void update(bool overflow);

  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  LossScalerConfig config_;
  bool dynamic_;
  double scale_;
  int64_t hysteresis_left_;
  int64_t steps_ = 0;
  int64_t last_overflow_ = -1;
  int64_t skipped_ = 0;
};

}  // namespace pipetrain::optim
