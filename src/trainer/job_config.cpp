#include "trainer/job_config.h"

#include <filesystem>
#include <map>

#include "pipetrain/config/json_value.h"
#include "pipetrain/config/unknown_keys.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::trainer {

const config::KeyTable<JobConfig>& job_keys() {
  static const config::KeyTable<JobConfig> table = [] {
    config::KeyTable<JobConfig> t;
    t.include(engine::training_keys(), PIPETRAIN_FIELD(engine))
        .include(topology::layout_keys(), PIPETRAIN_FIELD(layout))
        .include(trainer_keys(), PIPETRAIN_FIELD(trainer))
        .include(models::model_keys(), PIPETRAIN_FIELD(model))
        .include(module::lora_keys(), PIPETRAIN_FIELD(lora))
        .include(objective_keys(), PIPETRAIN_FIELD(objective))
        .check([](const JobConfig& c) {
          schedule::check_schedule(c.engine.pipeline.schedule, c.layout.pipe, c.layout.chunks);
        });
    return t;
  }();
  return table;
}

void set_layout_keys(nlohmann::json& config, const topology::ParallelLayout& layout) {
  const auto& keys = job_keys();
  keys.set(config, "pipeline.stages", layout.pipe);
  keys.set(config, "pipeline.chunks", layout.chunks);
  keys.set(config, "model_parallel", layout.tensor);
  keys.set(config, "sequence_parallel", layout.sequence_parallel);
  keys.set(config, "context_parallel", layout.context);
  keys.set(config, "data_parallel", layout.data);
  keys.set(config, "expert_parallel", layout.expert);
}

namespace {

// DeepSpeed sections a DeepSpeed config may hold that pipetrain does not read, with what to
// use instead: named in the unknown-key error rather than matched to a near spelling.
const std::map<std::string, std::string>& deepspeed_sections() {
  static const std::map<std::string, std::string> sections = {
      {"wandb", "log.metrics or log.tensorboard"},
      {"comet", "log.metrics or log.tensorboard"},
      {"csv_monitor", "log.csv (one file)"},
      {"flops_profiler", "trace (a timeline of one step)"},
      {"activation_checkpointing", "pipeline.activation_checkpoint_interval"},
      {"amp", "bf16 or fp16"},
      {"autotuning", "pipetrain plan"},
  };
  return sections;
}

// DeepSpeed's tensorboard section {enabled, output_path, job_name} as log.tensorboard: the
// folder output_path/job_name with DeepSpeed's defaults ("" and "DeepSpeedJobName"), so a
// DeepSpeed config logs where DeepSpeed would.
void read_deepspeed_tensorboard(nlohmann::json& json) {
  if (!json.is_object() || !json.contains("tensorboard")) return;
  const nlohmann::json section = json["tensorboard"];
  json.erase("tensorboard");
  if (!section.is_object()) throw io::InputError("tensorboard must be an object (DeepSpeed's)");
  for (const auto& [key, value] : section.items()) {
    if (key != "enabled" && key != "output_path" && key != "job_name")
      throw io::InputError("unknown key tensorboard." + key +
                           " (DeepSpeed's section has enabled, output_path, job_name)");
  }
  if (!config::read_bool("tensorboard.enabled", section.value("enabled", nlohmann::json(false))))
    return;
  if (json.contains("log") && json["log"].is_object() && json["log"].contains("tensorboard"))
    throw io::InputError("tensorboard and log.tensorboard both name the event folder: keep one");
  std::filesystem::path folder = config::utf8_string(
      "tensorboard.output_path", section.value("output_path", nlohmann::json("")));
  folder /= config::utf8_string("tensorboard.job_name",
                                section.value("job_name", nlohmann::json("DeepSpeedJobName")));
  job_keys().set(json, "log.tensorboard", folder.string());
}

}  // namespace

void check_lora_section(const nlohmann::json& json) {
  if (!json.is_object() || !json.contains("lora") || !json["lora"].is_object()) return;
  const nlohmann::json& section = json["lora"];
  module::LoraConfig lora;
  module::lora_keys().read(json, lora);  // the other sections' keys are not its to judge
  if (lora.enabled() || section.empty()) return;
  const nlohmann::json defaults = module::lora_keys().write(module::LoraConfig{})["lora"];
  for (const auto& [key, value] : section.items()) {
    if (key == "rank") continue;
    if (!section.contains("rank") || !defaults.contains(key) || defaults[key] != value) {
      throw io::InputError("lora." + key + " is set but lora.rank is " +
                           (section.contains("rank") ? "0" : "missing") +
                           ", which trains every weight: set lora.rank (e.g. 8) for adapters, or "
                           "drop the lora section");
    }
  }
}

void refuse_unknown_keys(const std::vector<std::string>& unknown) {
  std::vector<std::string> rest;
  std::string named;
  for (const auto& key : unknown) {
    const auto found = deepspeed_sections().find(key.substr(0, key.find('.')));
    if (found == deepspeed_sections().end()) {
      rest.push_back(key);
    } else if (named.find(found->first + " ") == std::string::npos) {
      named += (named.empty() ? "" : "; ") + found->first + " (DeepSpeed's; pipetrain reads " +
               found->second + ")";
    }
  }
  std::string text = config::describe_unknown_keys(rest, job_keys().names());
  if (!named.empty()) text += (text.empty() ? "sections pipetrain does not read: " : "; ") + named;
  if (!text.empty()) throw io::InputError(text);
}

JobConfig parse_job_config(const nlohmann::json& given, std::vector<std::string>* unknown) {
  nlohmann::json json = given;
  config::accept_alias(json, "bfloat16", "bf16");  // DeepSpeed reads both
  read_deepspeed_tensorboard(json);
  JobConfig config;
  std::vector<std::string> keys = job_keys().read(json, config);
  if (unknown) *unknown = std::move(keys);
  return config;
}

nlohmann::json apply_overrides(nlohmann::json config, const TrainerOverrides& o) {
  const auto& keys = job_keys();
  const auto set = [&](const std::string& key, const auto& value) {
    if (value) keys.set(config, key, *value);
  };
  const auto set_text = [&](const std::string& key, const std::string& option,
                            const std::optional<std::string>& value) {
    if (value) keys.set(config, key, config::utf8_string(option, *value));
  };
  set("pipeline.stages", o.pipe);
  if (o.micro_batches) {
    // The batch follows the micro-batch count, as in Megatron.
    set("gradient_accumulation_steps", o.micro_batches);
    if (config.contains("train_micro_batch_size_per_gpu")) keys.erase(config, "train_batch_size");
  }
  set("train_iters", o.train_iters);
  set("eval_interval", o.eval_interval);
  set("seed", o.seed);
  set("optimizer.params.lr", o.lr);
  set_text("save", "--save", o.save);
  set_text("load", "--load", o.load);
  set_text("trace", "--trace", o.trace);
  set_text("pipeline.schedule", "--schedule", o.schedule);
  set("pipeline.chunks", o.chunks);
  set_text("device", "--device", o.device);
  set("data_parallel", o.data);  // checked against the job's size
  set("model_parallel", o.model);
  set("context_parallel", o.context);
  set("expert_parallel", o.expert);
  set("zero_optimization.stage", o.zero);
  if (o.sequence_parallel) keys.set(config, "sequence_parallel", true);
  if (o.overwrite) keys.set(config, "overwrite", true);
  return config;
}

std::string key_table_markdown() {
  return config::markdown_table(job_keys().docs());
}

}  // namespace pipetrain::trainer
