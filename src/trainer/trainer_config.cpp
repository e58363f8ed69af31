#include "pipetrain/trainer/trainer_config.h"

#include "pipetrain/config/config_section.h"
#include "pipetrain/errors.h"

namespace pipetrain {
namespace {

std::vector<std::string> strings(const ConfigSection& section, const std::string& key,
                                 const std::vector<std::string>& fallback) {
  if (!section.has(key)) return fallback;
  const auto& value = section.raw().at(key);
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array())
    throw InputError(section.path() + "." + key + " must be a string or a list of strings");
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string())
      throw InputError(section.path() + "." + key + " must be a string or a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

void at_least(int64_t value, int64_t least, const std::string& key) {
  if (value < least) {
    throw InputError(key + " must be at least " + std::to_string(least) + ", got " +
                     std::to_string(value));
  }
}

}  // namespace

const std::vector<std::string>& trainer_keys() {
  static const std::vector<std::string> keys = {
      "train_iters", "eval_interval", "eval_iters",    "save_interval", "save",
      "load",        "data",          "log",           "sample",        "trace",
      "trace_step",  "data_parallel", "model_parallel"};
  return keys;
}

TrainerConfig parse_trainer_config(const nlohmann::json& json) {
  const ConfigSection root(json, "");
  TrainerConfig c;
  c.data_parallel = root.get_int("data_parallel", c.data_parallel);
  at_least(c.data_parallel, 0, "data_parallel");
  c.model_parallel = root.get_int("model_parallel", c.model_parallel);
  at_least(c.model_parallel, 1, "model_parallel");
  c.train_iters = root.get_int("train_iters", c.train_iters);
  c.eval_interval = root.get_int("eval_interval", c.eval_interval);
  c.eval_iters = root.get_int("eval_iters", c.eval_iters);
  c.save_interval = root.get_int("save_interval", c.save_interval);
  c.save = root.get_string("save", c.save);
  c.load = root.get_string("load", c.load);
  c.trace = root.get_string("trace", c.trace);
  c.trace_step = root.get_int("trace_step", c.trace_step);
  at_least(c.train_iters, 1, "train_iters");
  at_least(c.eval_interval, 0, "eval_interval");
  at_least(c.eval_iters, 1, "eval_iters");
  at_least(c.save_interval, 0, "save_interval");
  at_least(c.trace_step, 0, "trace_step");

  const ConfigSection data = root.section("data");
  c.data.type = data.get_string("type", c.data.type);
  c.data.paths = strings(data, "paths", c.data.paths);
  c.data.token_bytes = data.get_int("token_bytes", c.data.token_bytes);
  c.data.validation_fraction = data.get_double("validation_fraction", c.data.validation_fraction);
  if (c.data.type != "text" && c.data.type != "tokens" && c.data.type != "synthetic") {
    throw InputError("data.type must be \"text\", \"tokens\" or \"synthetic\", got \"" +
                     c.data.type + "\"");
  }

  const ConfigSection log = root.section("log");
  c.log.metrics = log.get_string("metrics", c.log.metrics);
  c.log.csv = log.get_string("csv", c.log.csv);
  c.log.tensorboard = log.get_string("tensorboard", c.log.tensorboard);

  const ConfigSection sample = root.section("sample");
  c.sample.prompt = sample.get_string("prompt", c.sample.prompt);
  c.sample.tokens = sample.get_int("tokens", c.sample.tokens);
  c.sample.temperature = sample.get_double("temperature", c.sample.temperature);
  c.sample.top_k = sample.get_int("top_k", c.sample.top_k);
  at_least(c.sample.tokens, 0, "sample.tokens");
  if (c.sample.temperature < 0) throw InputError("sample.temperature must be >= 0");
  return c;
}

nlohmann::json apply_overrides(nlohmann::json config, const TrainerOverrides& o) {
  if (o.pipe) config["pipeline"]["stages"] = *o.pipe;
  if (o.micro_batches) {
    // The batch follows the micro-batch count, as in Megatron.
    config["gradient_accumulation_steps"] = *o.micro_batches;
    if (config.contains("train_micro_batch_size_per_gpu")) config.erase("train_batch_size");
  }
  if (o.train_iters) config["train_iters"] = *o.train_iters;
  if (o.eval_interval) config["eval_interval"] = *o.eval_interval;
  if (o.seed) config["seed"] = *o.seed;
  if (o.lr) config["optimizer"]["params"]["lr"] = *o.lr;
  if (o.save) config["save"] = *o.save;
  if (o.load) config["load"] = *o.load;
  if (o.trace) config["trace"] = *o.trace;
  if (o.data) config["data_parallel"] = *o.data;  // checked against the job's size
  if (o.model) config["model_parallel"] = *o.model;
  return config;
}

}  // namespace pipetrain
