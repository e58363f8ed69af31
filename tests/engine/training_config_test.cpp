#include <gtest/gtest.h>

#include <cmath>

#include "pipetrain/engine/training_config.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/optim/optimizer.h"

namespace pipetrain::engine {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const io::InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(BatchArithmetic, AnyTwoDetermineTheThird) {
  TrainingConfig c;
  c.train_batch_size = 32;
  c.train_micro_batch_size_per_gpu = 4;
  resolve_batch(c, 2);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);

  c = {};
  c.train_batch_size = 32;
  c.gradient_accumulation_steps = 8;
  resolve_batch(c, 2);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 2);

  c = {};
  c.train_micro_batch_size_per_gpu = 3;
  c.gradient_accumulation_steps = 5;
  resolve_batch(c, 2);
  EXPECT_EQ(c.train_batch_size, 30);
}

TEST(BatchArithmetic, DisagreementShowsTheArithmetic) {
  TrainingConfig c;
  c.train_batch_size = 32;
  c.train_micro_batch_size_per_gpu = 4;
  c.gradient_accumulation_steps = 2;
  EXPECT_EQ(
      error_of([&] { resolve_batch(c, 2); }),
      "train_batch_size 32 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 * "
      "data-parallel size 2 = 16");
  c = {};
  c.train_batch_size = 30;
  c.train_micro_batch_size_per_gpu = 4;
  EXPECT_NE(error_of([&] { resolve_batch(c, 2); }).find("30 is not divisible by 8"),
            std::string::npos);
  c = {};
  EXPECT_NE(error_of([&] { resolve_batch(c, 1); }).find("set train_batch_size"), std::string::npos);
}

TEST(TrainingConfig, ReadsDeepSpeedKeysAndNamesBadOnes) {
  const auto json = nlohmann::json::parse(R"({
    "train_batch_size": 16, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.95]}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
    "pipeline": {"activation_checkpoint_interval": 1},
    "model": {"type": "mlp", "layers": 3}, "flops_profiler": {}})");
  const auto config = parse_training_config(json, {"model"});
  EXPECT_EQ(config.train_batch_size, 16);
  EXPECT_EQ(config.optimizer.type, "AdamW");
  EXPECT_EQ(config.pipeline.activation_checkpoint_interval, 1);
  EXPECT_EQ(models::parse_model_config(json).mlp.layers, 3);
  EXPECT_EQ(config.unknown_keys, std::vector<std::string>{"flops_profiler"});

  auto parse = [](const char* text) {
    return error_of([&] { parse_training_config(nlohmann::json::parse(text)); });
  };
  EXPECT_EQ(parse(R"({"train_batch_size": "16"})"),
            R"(train_batch_size must be an integer, got "16")");
  EXPECT_EQ(parse(R"({"pipeline": {"activation_checkpoint_interval": -1}})"),
            "pipeline.activation_checkpoint_interval must be at least 0, got -1");
  // The pipeline's shape is the layout's, not the engine's.
  EXPECT_EQ(
      parse_training_config(nlohmann::json::parse(R"({"pipeline": {"stages": 2}})")).unknown_keys,
      std::vector<std::string>{"pipeline.stages"});
  EXPECT_EQ(parse(R"({"optimizer": {"type": "Lamb"}})"),
            R"(optimizer.type must be Adam, AdamW or SGD, got "Lamb")");
  // DeepSpeed reads optimizer names in any case.
  EXPECT_EQ(parse_training_config(nlohmann::json::parse(R"({"optimizer": {"type": "adamw"}})"))
                .optimizer.type,
            "AdamW");
  EXPECT_EQ(parse(R"({"gradient_accumulation_steps": -2})"),
            "gradient_accumulation_steps must be at least 1, got -2");
  EXPECT_EQ(parse(R"({"pipeline": []})"), "pipeline must be an object, got []");
}

TEST(Optimizer, RejectsBadParams) {
  at::Tensor w = at::zeros({2}).requires_grad_(true);
  EXPECT_EQ(error_of([&] {
              optim::make_optimizer({"Adam", {{"lr", -1.0}}}, {w});
            }),
            "optimizer.params.lr must be > 0, got -1.000000");
  EXPECT_EQ(error_of([&] {
              optim::make_optimizer({"Adam", {{"betas", 0.9}}}, {w});
            }),
            "optimizer.params.betas must be a list of numbers, got 0.9");
  EXPECT_EQ(error_of([&] {
              optim::make_optimizer({"SGD", {{"nesterov", true}}}, {w});
            }),
            "unknown key optimizer.params.nesterov");
  EXPECT_NO_THROW(
      optim::make_optimizer({"AdamW", {{"lr", 0.1}, {"betas", {0.8, 0.9}}, {"eps", 1e-6}}}, {w}));
}

TEST(LrSchedule, FollowsDeepSpeedsFormulas) {
  const auto warmup = optim::make_lr_schedule(
      {"WarmupLR", {{"warmup_min_lr", 0.0}, {"warmup_max_lr", 0.1}, {"warmup_num_steps", 100}}},
      0.1);
  EXPECT_DOUBLE_EQ(warmup(0), 0.0);
  EXPECT_NEAR(warmup(9), 0.1 * std::log(10.0) / std::log(100.0), 1e-12);  // log warm-up
  EXPECT_DOUBLE_EQ(warmup(100), 0.1);
  EXPECT_DOUBLE_EQ(warmup(5000), 0.1);

  const auto decay = optim::make_lr_schedule({"WarmupDecayLR",
                                              {{"warmup_max_lr", 0.1},
                                               {"warmup_num_steps", 10},
                                               {"total_num_steps", 110},
                                               {"warmup_type", "linear"}}},
                                             0.1);
  EXPECT_DOUBLE_EQ(decay(5), 0.05);
  EXPECT_DOUBLE_EQ(decay(60), 0.05);
  EXPECT_DOUBLE_EQ(decay(110), 0.0);

  const auto cosine = optim::make_lr_schedule({"WarmupCosineLR",
                                               {{"warmup_num_steps", 10},
                                                {"total_num_steps", 110},
                                                {"warmup_type", "linear"},
                                                {"cos_min_ratio", 0.0}}},
                                              0.2);
  EXPECT_DOUBLE_EQ(cosine(5), 0.1);
  EXPECT_NEAR(cosine(60), 0.1, 1e-12);  // half way down the cosine
  EXPECT_NEAR(cosine(110), 0.0, 1e-12);

  EXPECT_DOUBLE_EQ(optim::make_lr_schedule({}, 0.3)(1000), 0.3);
  EXPECT_EQ(error_of([] {
              optim::make_lr_schedule({"WarmupDecayLR", {{"warmup_num_steps", 10}}}, 0.1);
            }),
            "scheduler.params.total_num_steps must exceed warmup_num_steps");
}

}  // namespace
}  // namespace pipetrain::engine
