#include "pipetrain/trainer/job_config.h"

#include "pipetrain/config/json_value.h"

namespace pipetrain::trainer {

const config::KeyTable<JobConfig>& job_keys() {
  static const config::KeyTable<JobConfig> table = [] {
    config::KeyTable<JobConfig> t;
    t.include(engine::training_keys(), PIPETRAIN_FIELD(engine))
        .include(trainer_keys(), PIPETRAIN_FIELD(trainer))
        .include(models::model_keys(), PIPETRAIN_FIELD(model));
    return t;
  }();
  return table;
}

JobConfig parse_job_config(const nlohmann::json& json, std::vector<std::string>* unknown) {
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
  return config;
}

std::string key_table_markdown() {
  return config::markdown_table(job_keys().docs());
}

}  // namespace pipetrain::trainer
