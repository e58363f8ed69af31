#include "pipetrain/trainer/job_config.h"

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

std::string key_table_markdown() {
  return config::markdown_table(job_keys().docs());
}

}  // namespace pipetrain::trainer
