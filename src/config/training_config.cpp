#include "pipetrain/config/training_config.h"

#include "pipetrain/errors.h"

namespace pipetrain {
namespace {

nlohmann::json params_of(const ConfigSection& section) {
  section.section("params");  // checks that it is an object
  const nlohmann::json& all = section.raw();
  return all.contains("params") ? all.at("params") : nlohmann::json::object();
}

void append(std::vector<std::string>& to, const std::vector<std::string>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

}  // namespace

TrainingConfig parse_training_config(const nlohmann::json& json,
                                     const std::vector<std::string>& extra_keys) {
  const ConfigSection root(json, "");
  TrainingConfig c;
  c.train_batch_size = root.get_int("train_batch_size", 0);
  c.train_micro_batch_size_per_gpu = root.get_int("train_micro_batch_size_per_gpu", 0);
  c.gradient_accumulation_steps = root.get_int("gradient_accumulation_steps", 0);
  c.steps_per_print = root.get_int("steps_per_print", c.steps_per_print);
  c.wall_clock_breakdown = root.get_bool("wall_clock_breakdown", c.wall_clock_breakdown);
  c.gradient_clipping = root.get_double("gradient_clipping", c.gradient_clipping);
  c.seed = root.get_int("seed", c.seed);
  c.comm_timeout = root.get_double("comm_timeout", c.comm_timeout);
  c.reduce_bucket_size = root.get_int("reduce_bucket_size", c.reduce_bucket_size);
  std::vector<std::string> known = {"train_batch_size",
                                    "train_micro_batch_size_per_gpu",
                                    "gradient_accumulation_steps",
                                    "steps_per_print",
                                    "wall_clock_breakdown",
                                    "gradient_clipping",
                                    "seed",
                                    "comm_timeout",
                                    "reduce_bucket_size",
                                    "optimizer",
                                    "scheduler",
                                    "pipeline",
                                    "model",
                                    "bf16",
                                    "fp16",
                                    "communication_data_type"};
  known.insert(known.end(), extra_keys.begin(), extra_keys.end());
  append(c.unknown_keys, root.unknown_keys(known));

  const ConfigSection optimizer = root.section("optimizer");
  c.optimizer.type = optimizer.get_string("type", c.optimizer.type);
  c.optimizer.params = params_of(optimizer);
  append(c.unknown_keys, optimizer.unknown_keys({"type", "params"}));

  const ConfigSection scheduler = root.section("scheduler");
  c.scheduler.type = scheduler.get_string("type", c.scheduler.type);
  c.scheduler.params = params_of(scheduler);
  append(c.unknown_keys, scheduler.unknown_keys({"type", "params"}));

  const ConfigSection pipeline = root.section("pipeline");
  c.pipeline.stages = pipeline.get_int("stages", c.pipeline.stages);
  c.pipeline.partition_method =
      pipeline.get_string("partition_method", c.pipeline.partition_method);
  c.pipeline.activation_checkpoint_interval =
      pipeline.get_int("activation_checkpoint_interval", c.pipeline.activation_checkpoint_interval);
  c.pipeline.seed_layers = pipeline.get_bool("seed_layers", c.pipeline.seed_layers);
  c.pipeline.schedule = pipeline.get_string("schedule", c.pipeline.schedule);
  c.pipeline.partitioned_transfers =
      pipeline.get_bool("partitioned_transfers", c.pipeline.partitioned_transfers);
  append(c.unknown_keys,
         pipeline.unknown_keys({"stages", "partition_method", "activation_checkpoint_interval",
                                "seed_layers", "schedule", "partitioned_transfers"}));

  const ConfigSection bf16 = root.section("bf16");
  const ConfigSection fp16 = root.section("fp16");
  const bool bf16_on = bf16.get_bool("enabled", false);
  const bool fp16_on = fp16.get_bool("enabled", false);
  if (bf16_on && fp16_on)
    throw InputError("bf16.enabled and fp16.enabled exclude each other; enable one");
  c.precision.dtype = bf16_on ? "bf16" : fp16_on ? "fp16" : "fp32";
  append(c.unknown_keys, bf16.unknown_keys({"enabled"}));
  LossScalerConfig& scaler = c.precision.loss_scaler;
  scaler.loss_scale = fp16.get_double("loss_scale", scaler.loss_scale);
  scaler.initial_scale_power = fp16.get_int("initial_scale_power", scaler.initial_scale_power);
  scaler.window = fp16.get_int("loss_scale_window", scaler.window);
  scaler.hysteresis = fp16.get_int("hysteresis", scaler.hysteresis);
  scaler.min_loss_scale = fp16.get_double("min_loss_scale", scaler.min_loss_scale);
  append(c.unknown_keys, fp16.unknown_keys({"enabled", "loss_scale", "initial_scale_power",
                                            "loss_scale_window", "hysteresis", "min_loss_scale"}));
  if (scaler.loss_scale < 0) throw InputError("fp16.loss_scale must be >= 0 (0: dynamic)");
  if (scaler.window < 1 || scaler.hysteresis < 1 || !(scaler.min_loss_scale > 0)) {
    throw InputError(
        "fp16.loss_scale_window and fp16.hysteresis must be at least 1, fp16.min_loss_scale > 0");
  }
  if (scaler.initial_scale_power < 0 || scaler.initial_scale_power > 60) {
    throw InputError("fp16.initial_scale_power must be in 0..60");
  }
  c.precision.communication_data_type = root.get_string("communication_data_type", "fp32");
  if (c.precision.communication_data_type != "fp32" &&
      c.precision.communication_data_type != c.precision.dtype) {
    throw InputError("communication_data_type must be \"fp32\" or the model's \"" +
                     c.precision.dtype + "\", got \"" + c.precision.communication_data_type + "\"");
  }

  std::vector<std::string> unknown_model;
  c.model = models::parse_model_config(root.section("model"), &unknown_model);
  append(c.unknown_keys, unknown_model);

  auto at_least = [](int64_t value, int64_t least, const char* key) {
    if (value < least) {
      throw InputError(std::string(key) + " must be at least " + std::to_string(least) + ", got " +
                       std::to_string(value));
    }
  };
  at_least(c.steps_per_print, 1, "steps_per_print");
  at_least(c.pipeline.stages, 1, "pipeline.stages");
  at_least(c.pipeline.activation_checkpoint_interval, 0, "pipeline.activation_checkpoint_interval");
  at_least(c.reduce_bucket_size, 1, "reduce_bucket_size");
  if (c.gradient_clipping < 0) throw InputError("gradient_clipping must be >= 0");
  if (c.comm_timeout < 0) throw InputError("comm_timeout must be >= 0");
  for (const char* key :
       {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}) {
    if (root.has(key)) at_least(root.get_int(key, 0), 1, key);
  }
  if (c.optimizer.type != "Adam" && c.optimizer.type != "AdamW" && c.optimizer.type != "SGD") {
    throw InputError("optimizer.type must be Adam, AdamW or SGD, got \"" + c.optimizer.type + "\"");
  }
  if (!c.scheduler.type.empty() && c.scheduler.type != "WarmupLR" &&
      c.scheduler.type != "WarmupDecayLR" && c.scheduler.type != "WarmupCosineLR") {
    throw InputError("scheduler.type must be WarmupLR, WarmupDecayLR or WarmupCosineLR, got \"" +
                     c.scheduler.type + "\"");
  }
  if (c.pipeline.schedule != "train") {
    throw InputError("pipeline.schedule: the engine runs \"train\" (1F1B) so far, got \"" +
                     c.pipeline.schedule + "\"");
  }
  return c;
}

void resolve_batch(TrainingConfig& c, int64_t dp) {
  int64_t& batch = c.train_batch_size;
  int64_t& micro = c.train_micro_batch_size_per_gpu;
  int64_t& steps = c.gradient_accumulation_steps;
  const std::string shown = "train_batch_size " + std::to_string(batch) +
                            ", train_micro_batch_size_per_gpu " + std::to_string(micro) +
                            ", gradient_accumulation_steps " + std::to_string(steps) +
                            ", data-parallel size " + std::to_string(dp);
  auto divide = [&](int64_t total, int64_t by, const std::string& what) {
    if (total % by != 0) {
      throw InputError(what + ": " + std::to_string(total) + " is not divisible by " +
                       std::to_string(by) + " (" + shown + ")");
    }
    return total / by;
  };
  if (batch && micro && steps) {
    if (batch != micro * steps * dp) {
      throw InputError("train_batch_size " + std::to_string(batch) +
                       " != train_micro_batch_size_per_gpu " + std::to_string(micro) +
                       " * gradient_accumulation_steps " + std::to_string(steps) +
                       " * data-parallel size " + std::to_string(dp) + " = " +
                       std::to_string(micro * steps * dp));
    }
  } else if (batch && micro) {
    steps = divide(batch, micro * dp,
                   "gradient_accumulation_steps = train_batch_size / (micro * data-parallel)");
  } else if (batch && steps) {
    micro = divide(batch, steps * dp,
                   "train_micro_batch_size_per_gpu = train_batch_size / (steps * data-parallel)");
  } else if (micro) {
    if (!steps) steps = 1;
    batch = micro * steps * dp;
  } else if (batch) {
    steps = 1;
    micro = divide(batch, dp, "train_micro_batch_size_per_gpu = train_batch_size / data-parallel");
  } else {
    throw InputError("set train_batch_size or train_micro_batch_size_per_gpu (" + shown + ")");
  }
}

}  // namespace pipetrain
