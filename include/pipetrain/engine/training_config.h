#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/data_parallel/zero_config.h"
#include "pipetrain/device/device_choice.h"
#include "pipetrain/module/partition_method.h"
#include "pipetrain/module/recompute.h"
#include "pipetrain/optim/optimizer_config.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/schedule_config.h"

namespace pipetrain::engine {

// The pipeline's keys but its shape: stages and chunks are the layout's
// (topology::layout_keys), the grid's and the module's.
struct PipelineConfig {
  module::PartitionMethod partition_method{};  // by parameter counts unless set
  int64_t activation_checkpoint_interval = 0;
  // Selective recompute: the parts of layers every stage recomputes (one set), or each
  // stage its own (one set per stage); empty: none.
  std::vector<module::RecomputeSet> recompute;
  // Stage `stage`'s set.
  module::RecomputeSet recompute_of(int64_t stage) const {
    if (recompute.empty()) return {};
    return recompute.size() == 1 ? recompute.front()
                                 : recompute.at(static_cast<std::size_t>(stage));
  }
  // Which schedule trains, its chunks, file and live bound (the schedule layer's keys).
  schedule::ScheduleConfig schedule;
  // With tensor parallelism: each rank of a group sends only its 1/size share of an
  // activation or gradient to the next (previous) stage, which all-gathers the shares.
  bool partitioned_transfers = true;
};

struct TrainingConfig {
  // Batch arithmetic: train_batch_size = micro batch * accumulation steps * data-parallel size.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  double gradient_clipping = 0.0;  // max global norm; 0: off
  // The loss is the sum over every counted token (labels not tensor_parallel::kIgnoreIndex)
  // of the global batch, over all micro-batches and replicas, divided by their count;
  // off: the mean of the micro-batches' means (equal when every micro-batch counts as many).
  bool per_token_loss = false;
  int64_t seed = 1234;
  double comm_timeout = 0;  // seconds; 0: PIPETRAIN_COMM_TIMEOUT or 300
  // Elements per data-parallel all-reduce bucket without ZeRO (Megatron's --ddp-bucket-size;
  // ZeRO's reduce-scatter buckets are zero_optimization.reduce_bucket_size, DeepSpeed's).
  int64_t ddp_bucket_size = 25'000'000;
  // Reduce each gradient bucket while the step's last backward passes run.
  bool overlap_grad_reduce = true;
  device::DeviceKind device = device::DeviceKind::kAuto;
  optim::OptimizerConfig optimizer;
  // Parameters weight decay leaves alone: "auto" (biases, norms, embeddings), or regexes
  // over "TYPE.NAME" (see decayed_parameters).
  std::vector<std::string> weight_decay_exempt{"auto"};
  optim::SchedulerConfig scheduler;
  PipelineConfig pipeline;
  optim::PrecisionConfig precision;
  data_parallel::ZeroConfig zero;
  // Keys no table here knows: a program with keys of its own refuses the rest
  // (config::refuse_unknown_keys against training_keys().names()).
  std::vector<std::string> unknown_keys;

  // What the optimizer step reads of it.
  optim::StepConfig step() const {
    return {optimizer, scheduler, precision, gradient_clipping, weight_decay_exempt};
  }
};

// The DeepSpeed-style keys the engine reads, each bound once (see KeyTable).
const config::KeyTable<TrainingConfig>& training_keys();

// Reads the engine's keys, checking types, bounds and how keys fit together; InputError
// names the key. Batch sizes are left as given: resolve them with resolve_batch() once
// the data-parallel size is known. `extra_keys`: top-level keys another reader owns, not
// to be listed as unknown.
TrainingConfig parse_training_config(const nlohmann::json& json,
                                     const std::vector<std::string>& extra_keys = {});

// Fills in whichever of train_batch_size, micro batch size and accumulation steps is
// missing, given at least two (or the micro batch size alone: one step). Throws
// InputError showing the arithmetic if they disagree or do not divide.
void resolve_batch(TrainingConfig& config, int64_t data_parallel_size);

}  // namespace pipetrain::engine
