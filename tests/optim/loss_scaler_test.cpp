#include <gtest/gtest.h>

#include "pipetrain/engine/training_config.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/optim/loss_scaler.h"

namespace pipetrain::optim {
namespace {

TEST(LossScaler, DynamicHalvesAfterHysteresisAndGrowsAfterAWindow) {
  LossScaler scaler({.loss_scale = 0,
                     .initial_scale_power = 4,
                     .window = 3,
                     .hysteresis = 2,
                     .min_loss_scale = 1});
  EXPECT_EQ(scaler.scale(), 16);
  scaler.update(true);  // the first overflow uses up the hysteresis
  EXPECT_EQ(scaler.scale(), 16);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 8);
  scaler.update(false);  // three clean steps since the last overflow
  EXPECT_EQ(scaler.scale(), 16);
}

TEST(LossScaler, StaticNeverMovesButStillSkips) {
  LossScaler scaler({.loss_scale = 1024});
  scaler.update(true);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(LossScaler, BelowTheMinimumIsAnError) {
  LossScaler scaler({.loss_scale = 0,
                     .initial_scale_power = 1,
                     .window = 10,
                     .hysteresis = 1,
                     .min_loss_scale = 1});
  scaler.update(true);  // 2 -> 1
  EXPECT_EQ(scaler.scale(), 1);
  EXPECT_THROW(scaler.update(true), std::runtime_error);
}

TEST(LossScaler, StateRoundTrips) {
  LossScaler scaler({.initial_scale_power = 5, .hysteresis = 1});
  scaler.update(true);
  LossScaler restored({});
  restored.restore(scaler.state());
  EXPECT_EQ(restored.scale(), 16);
  EXPECT_EQ(restored.skipped_steps(), 1);
  EXPECT_THROW(restored.restore({{"scale", "big"}}), io::InputError);
}

TEST(PrecisionConfig, Bf16AndFp16ExcludeEachOther) {
  EXPECT_THROW(engine::parse_training_config(nlohmann::json::parse(
                   R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})")),
               io::InputError);
  const auto fp16 = engine::parse_training_config(nlohmann::json::parse(
      R"({"fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "hysteresis": 3}})"));
  EXPECT_EQ(fp16.precision.dtype, optim::Precision::kFp16);
  EXPECT_EQ(fp16.precision.loss_scaler.initial_scale_power, 12);
  EXPECT_THROW(engine::parse_training_config(
                   nlohmann::json::parse(R"({"fp16": {"enabled": true, "loss_scale": -1}})")),
               io::InputError);
  EXPECT_THROW(engine::parse_training_config(
                   nlohmann::json::parse(R"({"communication_data_type": "fp16"})")),
               io::InputError);
}

}  // namespace
}  // namespace pipetrain::optim
