// A job's config read once through the composed key table: the effective config written
// from the typed values reads back to the same config, for both built-in models.
#include <gtest/gtest.h>

#include <fstream>

#include "pipetrain/io/errors.h"
#include "trainer/job_config.h"

namespace pipetrain::trainer {
namespace {

nlohmann::json tiny_config() {
  std::ifstream in(std::string(PIPETRAIN_SOURCE_DIR) + "/tests/trainer/tiny.json");
  return nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
}

void expect_round_trip(const nlohmann::json& file) {
  std::vector<std::string> unknown;
  JobConfig config = parse_job_config(file, &unknown);
  EXPECT_TRUE(unknown.empty());
  engine::resolve_batch(config.engine, 1);
  const nlohmann::json effective = job_keys().write(config);
  JobConfig again = parse_job_config(effective, &unknown);
  EXPECT_TRUE(unknown.empty()) << unknown.front();
  EXPECT_EQ(job_keys().write(again), effective);
  EXPECT_EQ(again.engine.train_batch_size, config.engine.train_batch_size);
  EXPECT_EQ(again.model.type, config.model.type);
}

TEST(JobConfig, TheEffectiveConfigReadsBackTheSameForEveryModel) {
  expect_round_trip(tiny_config());
  nlohmann::json mlp = tiny_config();
  mlp["model"] = {{"type", "mlp"}, {"layers", 3}};
  mlp["data"] = {{"type", "synthetic"}};
  mlp["fp16"] = {{"enabled", true}};
  mlp["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 3}}}};
  expect_round_trip(mlp);
}

TEST(JobConfig, KeysOfTheOtherModelAndOfNoOwnerAreUnknown) {
  nlohmann::json file = tiny_config();
  file["model"] = {{"type", "mlp"}, {"vocab_size", 300}};
  file["flops_profiler"] = {{"enabled", true}};
  std::vector<std::string> unknown;
  parse_job_config(file, &unknown);
  EXPECT_EQ(unknown, (std::vector<std::string>{"flops_profiler", "model.vocab_size"}));
}

TEST(JobConfig, EachOwnerNamesItsOwnBadKey) {
  auto error = [](const nlohmann::json& file) {
    try {
      parse_job_config(file, nullptr);
    } catch (const io::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({{"pipeline", {{"stages", 0}}}}), "pipeline.stages must be at least 1, got 0");
  EXPECT_EQ(
      error({{"model", {{"type", "rnn"}}}}),
      R"(model.type must be "gemma3", "gpt", "llama", "mistral", "mixtral", "mlp", "qwen2", "qwen3" or "qwen3_moe", got "rnn")");
  EXPECT_EQ(error({{"eval_iters", 0}}), "eval_iters must be at least 1, got 0");
  EXPECT_EQ(error({{"scheduler", {{"type", ""}}}}), "no error");  // empty: no schedule
}

std::string refusal_of(const nlohmann::json& file) {
  try {
    std::vector<std::string> unknown;
    parse_job_config(file, &unknown);
    refuse_unknown_keys(unknown);
  } catch (const io::InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(JobConfig, EveryUnknownKeyIsRefusedInOneMessageWithTheKeyItMisspells) {
  nlohmann::json file = tiny_config();
  file["train_iter"] = 3;
  file["pipeline"]["schedul"] = "gpipe";
  file["zzz_unlike_anything"] = 1;
  EXPECT_EQ(refusal_of(file),
            "unknown keys pipeline.schedul (did you mean pipeline.schedule?), train_iter (did you "
            "mean train_iters?), zzz_unlike_anything");
  EXPECT_EQ(refusal_of(tiny_config()), "no error");
}

TEST(JobConfig, DeepSpeedSectionsPipetrainDoesNotReadAreNamedWithWhatItReads) {
  nlohmann::json file = tiny_config();
  file["wandb"] = {{"enabled", true}};
  file["csv_monitor"] = {{"enabled", true}, {"output_path", "x"}};
  EXPECT_EQ(refusal_of(file),
            "sections pipetrain does not read: csv_monitor (DeepSpeed's; pipetrain reads log.csv "
            "(one file)); wandb (DeepSpeed's; pipetrain reads log.metrics or log.tensorboard)");
}

TEST(JobConfig, DeepSpeedsOtherSpellingsAreReadAsDeepSpeedReadsThem) {
  nlohmann::json file = tiny_config();
  file["bfloat16"] = {{"enabled", true}};
  file["tensorboard"] = {{"enabled", true}, {"output_path", "tb"}, {"job_name", "run1"}};
  std::vector<std::string> unknown;
  const JobConfig config = parse_job_config(file, &unknown);
  EXPECT_TRUE(unknown.empty());
  EXPECT_EQ(config.engine.precision.dtype, optim::Precision::kBf16);
  EXPECT_EQ(config.trainer.log.tensorboard, "tb/run1");

  file["bf16"] = {{"enabled", true}};
  EXPECT_EQ(refusal_of(file),
            "bfloat16 and bf16 are one section (DeepSpeed reads both spellings): keep one");
  file.erase("bf16");
  file["tensorboard"]["enabled"] = false;
  EXPECT_EQ(parse_job_config(file, nullptr).trainer.log.tensorboard, "");
  file["tensorboard"]["flush"] = 1;
  EXPECT_EQ(refusal_of(file),
            "unknown key tensorboard.flush (DeepSpeed's section has enabled, output_path, "
            "job_name)");
}

TEST(JobConfig, TheKeyTableDocumentsEveryKeyOnce) {
  const std::string table = key_table_markdown();
  EXPECT_NE(table.find("| `pipeline.stages` | int | `1` |"), std::string::npos);
  EXPECT_NE(table.find("| `model.layers` | int | `4` | transformer blocks (model.type gpt) |"),
            std::string::npos);
  EXPECT_NE(table.find("| `train_iters` | int | `100` |"), std::string::npos);
}

}  // namespace
}  // namespace pipetrain::trainer
