#include <gtest/gtest.h>

#include <filesystem>

#include "pipetrain/io/errors.h"
#include "trainer/job_config.h"
#include "trainer/trainer_config.h"

namespace pipetrain::trainer {
namespace {

TEST(TrainerOverrides, WinOverTheFile) {
  const auto file =
      nlohmann::json::parse(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 4, "pipeline": {"stages": 2}, "train_iters": 100,
    "optimizer": {"type": "Adam", "params": {"lr": 0.001}}})");
  TrainerOverrides o;
  o.pipe = 4;
  o.micro_batches = 8;
  o.train_iters = 7;
  o.lr = 0.5;
  o.save = "out";
  o.data = 1;
  const auto effective = apply_overrides(file, o);
  EXPECT_EQ(effective["pipeline"]["stages"], 4);
  EXPECT_EQ(effective["gradient_accumulation_steps"], 8);
  EXPECT_FALSE(effective.contains("train_batch_size"));  // follows micro-batches now
  EXPECT_EQ(effective["optimizer"]["params"]["lr"], 0.5);
  EXPECT_EQ(effective["optimizer"]["type"], "Adam");
  const TrainerConfig trainer = parse_trainer_config(effective);
  EXPECT_EQ(trainer.train_iters, 7);
  EXPECT_EQ(trainer.save, "out");
  EXPECT_EQ(parse_job_config(effective, nullptr).layout.data, 1);
  EXPECT_EQ(parse_trainer_config(file).train_iters, 100);  // the file itself is untouched
}

TEST(TrainerOverrides, EveryOptionLandsOnAKeyOfTheJob) {
  TrainerOverrides o{.pipe = 2,
                     .data = 1,
                     .model = 2,
                     .micro_batches = 4,
                     .train_iters = 3,
                     .eval_interval = 2,
                     .seed = 9,
                     .chunks = 2,
                     .lr = 0.1,
                     .save = "s",
                     .load = "l",
                     .trace = "t.json",
                     .schedule = "interleaved",
                     .device = "cpu"};
  // A name job_keys() lacks would throw std::logic_error here.
  const auto effective = apply_overrides(nlohmann::json::object(), o);
  const JobConfig job = parse_job_config(effective, nullptr);
  EXPECT_EQ(job.trainer.eval_interval, 2);
  EXPECT_EQ(job.trainer.trace, "t.json");
  EXPECT_EQ(job.layout.tensor, 2);
  EXPECT_EQ(job.layout.chunks, 2);
  EXPECT_EQ(effective["pipeline"]["schedule"], "interleaved");
  EXPECT_EQ(effective["device"], "cpu");
  EXPECT_EQ(effective["seed"], 9);
  EXPECT_EQ(effective["optimizer"]["params"]["lr"], 0.1);
}

TEST(TrainerConfig, TheTokenizerIsKeptAsAnAbsolutePath) {
  const TrainerConfig config = parse_trainer_config(nlohmann::json::parse(
      R"({"data": {"type": "indexed"}, "sample": {"tokenizer": "models/../spm.model"}})"));
  const std::filesystem::path path = config.sample.tokenizer;
  EXPECT_TRUE(path.is_absolute()) << path;
  EXPECT_EQ(path, std::filesystem::current_path() / "spm.model");
  EXPECT_EQ(parse_trainer_config(nlohmann::json::object()).sample.tokenizer, "");  // bytes
}

TEST(TrainerConfig, BadKeysAreNamed) {
  auto error = [](const char* text) {
    try {
      parse_trainer_config(nlohmann::json::parse(text));
    } catch (const io::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(R"({"train_iters": 0})"), "train_iters must be at least 1, got 0");
  EXPECT_EQ(error(R"({"data": {"type": "images"}})"),
            R"(data.type must be "text", "tokens", "indexed" or "synthetic", got "images")");
  EXPECT_EQ(error(R"({"data": {"paths": [1]}})"),
            "data.paths must be a string or a list of strings");
  EXPECT_EQ(error(R"({"save": 3})"), "save must be a string, got 3");
}

}  // namespace
}  // namespace pipetrain::trainer
