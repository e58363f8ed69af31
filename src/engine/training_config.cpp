#include "pipetrain/engine/training_config.h"

#include <algorithm>

#include "optim/weight_decay.h"
#include "pipetrain/config/unknown_keys.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/optim/optimizer_settings.h"

namespace pipetrain::engine {
namespace {

const config::Names<device::DeviceKind>& devices() {
  static const config::Names<device::DeviceKind> names{{"auto", device::DeviceKind::kAuto},
                                                       {"cpu", device::DeviceKind::kCpu},
                                                       {"cuda", device::DeviceKind::kCuda}};
  return names;
}

// The batch sizes: 0 is unset (derived by resolve_batch), left out of the effective config.
void bind_batch(config::KeyTable<TrainingConfig>& t) {
  auto batch_key = [&t](const char* name, auto field, const char* help) {
    t.custom(
        name, "int", help,
        [field](const std::string& key, const nlohmann::json& v, TrainingConfig& c) {
          field(c) = config::read_integer(key, v, config::at_least(1));
        },
        [field](const TrainingConfig& c) {
          return field(c) ? nlohmann::json(field(c)) : nlohmann::json();
        });
  };
  batch_key("train_batch_size", PIPETRAIN_FIELD(train_batch_size),
            "samples per optimizer step over all replicas");
  batch_key("train_micro_batch_size_per_gpu", PIPETRAIN_FIELD(train_micro_batch_size_per_gpu),
            "samples per micro-batch");
  batch_key("gradient_accumulation_steps", PIPETRAIN_FIELD(gradient_accumulation_steps),
            "micro-batches per step (= pipeline micro-batches); any two of these three "
            "determine the third, and `train_batch_size = micro × steps × data-parallel size` "
            "must hold (the error shows the arithmetic)");
}

// A list of kind names as a set; InputError naming `key` otherwise.
module::RecomputeSet read_recompute_set(const std::string& key, const nlohmann::json& v) {
  if (!v.is_array()) throw io::InputError(key + " must be a list of part names");
  module::RecomputeSet set;
  for (const auto& item : v) {
    const auto kind =
        item.is_string() ? module::recompute_kind(item.get<std::string>()) : std::nullopt;
    if (!kind) {
      throw io::InputError(key + ": " + item.dump() +
                           " is not one of \"attention\", \"mlp\", \"mlp_activation\", "
                           "\"norms\" or \"experts\"");
    }
    set.add(*kind);
  }
  return set;
}

// One set for every stage (a list of names), or one per stage (a list of lists).
std::vector<module::RecomputeSet> read_recompute(const std::string& key, const nlohmann::json& v) {
  if (!v.is_array()) throw io::InputError(key + " must be a list of part names, or of such lists");
  if (v.empty()) return {};
  if (!v.front().is_array()) return {read_recompute_set(key, v)};
  std::vector<module::RecomputeSet> sets;
  for (std::size_t i = 0; i < v.size(); ++i)
    sets.push_back(read_recompute_set(key + "[" + std::to_string(i) + "]", v[i]));
  return sets;
}

nlohmann::json recompute_json(const std::vector<module::RecomputeSet>& sets) {
  if (sets.size() == 1) return sets.front().names();
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& set : sets) stages.push_back(set.names());
  return stages;
}

void bind_run(config::KeyTable<TrainingConfig>& t) {
  t.integer("steps_per_print", PIPETRAIN_FIELD(steps_per_print), "progress line period",
            config::at_least(1))
      .flag("wall_clock_breakdown", PIPETRAIN_FIELD(wall_clock_breakdown),
            "also print time per instruction kind and stage")
      .number("gradient_clipping", PIPETRAIN_FIELD(gradient_clipping),
              "max global gradient norm; 0 is off", config::at_least(0))
      .flag("per_token_loss", PIPETRAIN_FIELD(per_token_loss),
            "the loss (and its gradient) is the sum over every counted token of the global "
            "batch divided by their count, not the mean of the micro-batches' means; on by "
            "itself for data with loss masks (Megatron's `--calculate-per-token-loss`)")
      .integer("seed", PIPETRAIN_FIELD(seed), "base seed of every layer's initialisation")
      .number("comm_timeout", PIPETRAIN_FIELD(comm_timeout),
              "deadline of every wait in seconds; 0: `PIPETRAIN_COMM_TIMEOUT` or 300",
              config::at_least(0))
      .integer("ddp_bucket_size", PIPETRAIN_FIELD(ddp_bucket_size),
               "elements per data-parallel all-reduce bucket without ZeRO (Megatron's "
               "`--ddp-bucket-size`; ZeRO's are `zero_optimization.reduce_bucket_size`)",
               config::at_least(1))
      .refused("reduce_bucket_size",
               "the former top-level name of `ddp_bucket_size`: refused with that advice",
               "at the top level is now ddp_bucket_size (elements per data-parallel all-reduce "
               "bucket); ZeRO's is zero_optimization.reduce_bucket_size")
      .flag("overlap_grad_reduce", PIPETRAIN_FIELD(overlap_grad_reduce),
            "reduce each data-parallel gradient bucket (all-reduce, or ZeRO's reduce-scatter) as "
            "soon as its gradients are final, while the step's last backward passes run "
            "(Megatron's name)")
      .choice("device", PIPETRAIN_FIELD(device), devices(),
              "where each rank computes: `cuda` (GPU local rank % visible GPUs; exit 2 without "
              "one), `cpu`, or `auto` (a GPU when the build has CUDA and one is visible)");
}

void bind_optimizer(config::KeyTable<TrainingConfig>& t) {
  t.include(
      optim::optimizer_keys(), [](auto& c) -> auto& { return c.optimizer; });
  t.texts("weight_decay_exempt", PIPETRAIN_FIELD(weight_decay_exempt),
          "parameters `weight_decay` leaves alone: `auto` (tensors of fewer than 2 "
          "dimensions, i.e. biases and norms, and the embeddings, as Megatron-style recipes "
          "configure it), or regexes searched in `TYPE.NAME` (the layer's type and the "
          "parameter's name, e.g. `GptBlock.qkv.bias`); `[]` decays every parameter")
      // Checked when read, not when the engine builds the optimizer: before any work.
      .check([](const TrainingConfig& c) {
        optim::WeightDecayRule{c.weight_decay_exempt};  // throws for a pattern that is no regex
        optim::read_optimizer_settings(c.optimizer);
        optim::make_lr_schedule(c.scheduler, optim::base_learning_rate(c.optimizer));
      });
  t.include(
      optim::scheduler_keys(), [](auto& c) -> auto& { return c.scheduler; });
}

void bind_pipeline(config::KeyTable<TrainingConfig>& t) {
  t.custom(
       "pipeline.partition_method", "string",
       "`parameters`, `uniform`, `type:REGEX`, `boundaries:A,B,...` or `profile` (see "
       "`pipetrain partition`)",
       [](const std::string& key, const nlohmann::json& v, TrainingConfig& c) {
         c.pipeline.partition_method = module::PartitionMethod(config::read_string(key, v));
       },
       [](const TrainingConfig& c) { return c.pipeline.partition_method.name(); })
      .integer("pipeline.activation_checkpoint_interval",
               PIPETRAIN_FIELD(pipeline.activation_checkpoint_interval),
               "layers per checkpointed run; 0 is off", config::at_least(0))
      .custom(
          "pipeline.recompute", "list",
          "selective recompute: the parts of every layer backward computes again instead of "
          "keeping their activations, from `attention` (core attention), `mlp` (the whole "
          "MLP), `mlp_activation` (the MLP's activation and output projection), `norms`, "
          "`experts` (a mixture of experts); or a list of such lists, one per stage "
          "(`[[\"mlp\"], []]`: the first stage recomputes its MLPs, the second nothing)",
          [](const std::string& key, const nlohmann::json& v, TrainingConfig& c) {
            c.pipeline.recompute = read_recompute(key, v);
          },
          [](const TrainingConfig& c) { return recompute_json(c.pipeline.recompute); })
      .include(
          schedule::schedule_keys(), [](auto& c) -> auto& { return c.pipeline.schedule; })
      .accepted("pipeline.seed_layers", "bool",
                "DeepSpeed's; accepted and ignored: layers are always seeded per index")
      .flag("pipeline.partitioned_transfers", PIPETRAIN_FIELD(pipeline.partitioned_transfers),
            "with tensor parallelism, send 1/t shares between stages and all-gather them")
      .refused("pipeline.receive_ahead",
               "removed (receives posted ahead saved no time on CPUs and never ran on GPUs): "
               "refused",
               "was removed: receives posted ahead saved no time "
               "(docs/design/receive-ahead.md); delete the key");
}

}  // namespace

const config::KeyTable<TrainingConfig>& training_keys() {
  static const config::KeyTable<TrainingConfig> table = [] {
    config::KeyTable<TrainingConfig> t;
    bind_batch(t);
    bind_run(t);
    bind_optimizer(t);
    bind_pipeline(t);
    t.include(
        optim::precision_keys(), [](auto& c) -> auto& { return c.precision; });
    t.include(
        data_parallel::zero_keys(), [](auto& c) -> auto& { return c.zero; });
    return t;
  }();
  return table;
}

TrainingConfig parse_training_config(const nlohmann::json& given,
                                     const std::vector<std::string>& extra_keys) {
  nlohmann::json json = given;
  config::accept_alias(json, "bfloat16", "bf16");  // DeepSpeed reads both
  TrainingConfig config;
  for (const auto& key : training_keys().read(json, config)) {
    const std::string top = key.substr(0, key.find('.'));
    if (std::find(extra_keys.begin(), extra_keys.end(), top) == extra_keys.end())
      config.unknown_keys.push_back(key);
  }
  return config;
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
      throw io::InputError(what + ": " + std::to_string(total) + " is not divisible by " +
                           std::to_string(by) + " (" + shown + ")");
    }
    return total / by;
  };
  if (batch && micro && steps) {
    if (batch != micro * steps * dp) {
      throw io::InputError("train_batch_size " + std::to_string(batch) +
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
    throw io::InputError("set train_batch_size or train_micro_batch_size_per_gpu (" + shown + ")");
  }
}

}  // namespace pipetrain::engine
