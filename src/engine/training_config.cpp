#include "pipetrain/engine/training_config.h"

#include <algorithm>

#include "optim/weight_decay.h"
#include "pipetrain/config/unknown_keys.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/optim/optimizer_settings.h"

namespace pipetrain::engine {
namespace {

// Chunks go with the schedules that run several per stage (the kinds table says how many),
// which need a pipe to spread them over.
void check_chunks(const TrainingConfig& c) {
  const PipelineConfig& p = c.pipeline;
  const schedule::ScheduleKind& kind = schedule::schedule_kind(p.schedule);
  const std::string named =
      "pipeline.schedule \"" + config::name_of(pipeline_schedules(), p.schedule) + "\"";
  const std::string chunks = std::to_string(p.chunks);
  if (!kind.uses_chunks) {
    if (p.chunks == 1) return;
    std::string chunked;
    for (const auto& other : schedule::schedule_kinds()) {
      if (other.chunked_in_config())
        chunked += (chunked.empty() ? "" : ", ") + std::string(other.config_names.front());
    }
    throw io::InputError("pipeline.chunks " + chunks + " needs a schedule with model chunks (" +
                         chunked + "), not " + named);
  }
  if (p.chunks > 1 && p.stages < 2) {
    throw io::InputError(named + " over " + chunks +
                         " chunks needs pipeline.stages of at least 2, got " +
                         std::to_string(p.stages));
  }
  if (p.schedule == schedule::Kind::kFile) return;  // the file's (check_schedule_file)
  const int least = kind.least_config_chunks();
  if (p.chunks < least || (kind.max_chunks > 0 && p.chunks > kind.max_chunks)) {
    throw io::InputError(named + " needs pipeline.chunks " +
                         (kind.max_chunks == least ? "of " : "of at least ") +
                         std::to_string(least) + ", got " + chunks);
  }
}

// A schedule file goes with pipeline.schedule "file", and gives the stages and chunks.
void check_schedule_file(const TrainingConfig& c) {
  const PipelineConfig& p = c.pipeline;
  const bool file_kind = p.schedule == schedule::Kind::kFile;
  if (file_kind != static_cast<bool>(p.file)) {
    throw io::InputError(file_kind ? "pipeline.schedule \"file\" needs pipeline.schedule_file"
                                   : "pipeline.schedule_file needs pipeline.schedule \"file\"");
  }
  if (!file_kind) return;
  const schedule::PipeShape& shape = p.file->shape;
  if (shape.stages != p.stages || shape.chunks != p.chunks) {
    throw io::InputError(p.schedule_file + " has " + std::to_string(shape.stages) + " ranks of " +
                         std::to_string(shape.chunks) + " chunk(s), but pipeline.stages is " +
                         std::to_string(p.stages) + " and pipeline.chunks " +
                         std::to_string(p.chunks));
  }
  schedule::plan_schedule_file(*p.file, static_cast<int>(p.max_live));  // refused if bad
}

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
  t.integer("pipeline.stages", PIPETRAIN_FIELD(pipeline.stages),
            "pipeline stages (data-parallel size = ranks / (stages × model_parallel))",
            config::at_least(1))
      .custom(
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
      .choice("pipeline.schedule", PIPETRAIN_FIELD(pipeline.schedule), pipeline_schedules(),
              "the training schedule: DeepSpeed's 1F1B (`train` is its DeepSpeed name), GPipe, "
              "Megatron's interleaved 1F1B over `pipeline.chunks`, zero-bubble ZB-H1 or ZB-H2 "
              "(weight gradients deferred into the bubbles), PyTorch's interleaved zero bubble "
              "and looped BFS over `pipeline.chunks`, or the V schedules ZBV and DualPipeV (two "
              "chunks per stage in a V: `pipeline.chunks` 2), or `file` "
              "(`pipeline.schedule_file`)")
      .integer("pipeline.chunks", PIPETRAIN_FIELD(pipeline.chunks),
               "model chunks per stage: at least 2 for `interleaved`, 1 or more for "
               "`interleaved-zb` and `looped-bfs` (layers split into stages × chunks parts, stage "
               "s holding parts s, s + stages, ...), 2 for `zbv` and `dualpipev` (stage s holding "
               "parts s and 2 × stages - 1 - s); 1 otherwise",
               config::at_least(1))
      .custom(
          "pipeline.schedule_file", "string",
          "with `pipeline.schedule` \"file\": each rank's compute order in PyTorch pipelining's "
          "CSV layout (a row per rank, cells such as `0F3`, `3I1`, `3W1` or "
          "`(0F3;3B1)OVERLAP_F_B`), or a `.json` file as `pipetrain schedule --format json` "
          "writes it; lowered, validated and simulated before any rank starts",
          [](const std::string&, const nlohmann::json& v, TrainingConfig& c) {
            c.pipeline.schedule_file = config::read_string("pipeline.schedule_file", v);
            c.pipeline.file = std::make_shared<const schedule::FileSchedule>(
                schedule::read_schedule_file(c.pipeline.schedule_file));
          },
          [](const TrainingConfig& c) -> nlohmann::json {
            if (c.pipeline.schedule_file.empty()) return nullptr;
            return c.pipeline.schedule_file;
          })
      .integer("pipeline.max_live", PIPETRAIN_FIELD(pipeline.max_live),
               "most micro-batches a stage may keep live (forwarded, not yet back-propagated); a "
               "schedule planning more is refused; 0: no bound",
               config::within(0, 1 << 30))
      .check(check_chunks)
      .check(check_schedule_file)
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

const config::Names<schedule::Kind>& pipeline_schedules() {
  static const config::Names<schedule::Kind> names = [] {
    config::Names<schedule::Kind> made;
    for (const auto& kind : schedule::schedule_kinds()) {
      for (const auto name : kind.config_names) made.push_back({std::string(name), kind.kind});
    }
    return made;
  }();
  return names;
}

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
