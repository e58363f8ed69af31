#include "engine/engine_state.h"

#include <map>
#include <utility>
#include <vector>

#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/pipe_lanes.h"

// How an engine is built: its communicators' tied groups and pipe lanes, data parallelism's
// gradient sync, the optimizer, ZeRO 3's layer gathering, the feed and the stage link. The
// interpreter that runs it is pipeline_engine.cpp.
namespace pipetrain::engine {
namespace {

TrainingConfig resolved(TrainingConfig config, int64_t data_parallel_size) {
  resolve_batch(config, data_parallel_size);
  return config;
}

}  // namespace

PipelineEngine::Impl::Impl(std::shared_ptr<module::PipelineModule> module,
                           std::shared_ptr<groups::Communicators> comms, TrainingConfig config)
    : module_(std::move(module)),
      comms_(std::move(comms)),
      grid_(comms_->grid()),
      config_(resolved(std::move(config), grid_->data_parallel_size())),
      device_(comms_->device()),
      progress_(grid_, config_.steps_per_print, config_.wall_clock_breakdown,
                config_.train_batch_size) {
  check_stage();
  if (config_.per_token_loss && !module_->has_token_loss()) {
    throw io::InputError(
        "per_token_loss: the model has no loss per token (a language model's; set "
        "PipelineModuleOptions::token_loss for a model of your own)");
  }
  module_->to(device_);
  // The schedules depend only on the shape: built and validated once, executed every batch.
  shape_ = {micro_batches(), grid_->pipe_parallel_size(), module_->options().chunks,
            module_->options().placement};
  train_program_ = program(config_.pipeline.schedule.kind, shape_.micro_batches);
  eval_program_ = program(schedule::Kind::kInference, shape_.micro_batches);
  infer_program_ = program(schedule::Kind::kInference, 1);
  comms_->connect_tied(*module_);
  // NCCL matches transfers by their order alone: it carries the pipe's payloads over lanes
  // that keep the plans' orders (a lane per pair of stages, or per channel where chunks
  // pass each other), each lane a communicator and stream of its own, so sends that wait
  // for their receive and deferred sends both run (the planner asks the same:
  // schedule::pipe_fits_nccl).
  lanes_ = schedule::pipe_lanes({plan_of(config_.pipeline.schedule.kind, shape_.micro_batches),
                                 plan_of(schedule::Kind::kInference, shape_.micro_batches),
                                 plan_of(schedule::Kind::kInference, 1)});
  comms_->connect_pipe(lanes_ ? std::optional(pipe_lanes(*lanes_)) : std::nullopt);
  // The model in its precision's dtype, once, before data parallelism lays out ZeRO's
  // storage (which holds the parameters from then on) and the optimizer keeps its masters.
  if (const auto dtype = optim::to_scalar_type(config_.precision.dtype); dtype != at::kFloat)
    module_->to(dtype);
  gradients_ = std::make_unique<data_parallel::GradientSync>(
      *module_, *comms_,
      data_parallel::GradientSync::DataParallel{
          .zero = config_.zero,
          .bucket_elements = config_.ddp_bucket_size,
          .wire = optim::to_scalar_type(config_.precision.communication_dtype),
          // ZeRO 2 and 3 reduce after every pass instead.
          .overlap = config_.overlap_grad_reduce && config_.zero.stage < 2});
  optimizer_ = std::make_unique<optim::MixedPrecisionOptimizer>(
      *module_, grid_, config_.step(), gradients_->norm_parameters(), gradients_->sharded(),
      gradients_->expert_parameters());
  if (auto sharded = gradients_->sharded_parameters()) gather_layers(std::move(sharded));
  feed_ = std::make_unique<MicroBatchFeed>(
      grid_, optimizer_->dtype(), device_,
      MicroBatchFeed::Ends{.first = shape_.stage_of(0) == grid_->stage_id(),
                           .last = holds_output()});
  link_ = std::make_unique<StageLink>(*comms_, config_.pipeline.partitioned_transfers);
}

PipelineEngine::Impl::~Impl() {
  if (gathering_) module_->set_layer_hooks(nullptr);  // ZeRO 3's, which this engine owns
}

void PipelineEngine::Impl::gather_layers(
    std::shared_ptr<data_parallel::ShardedParameters> parameters) {
  std::vector<std::pair<int, int>> chunks;
  std::map<int, std::vector<int>> buckets_of;
  for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
    chunks.push_back(module_->layer_range(chunk));
    for (int layer = chunks.back().first; layer < chunks.back().second; ++layer) {
      if (const int named = module_->parameter_layer(layer); named >= 0)
        buckets_of[layer] = parameters->buckets_of(named);
    }
  }
  // On a GPU backward runs on autograd's own thread: a gather may start there only over a
  // communicator that allows it without staging through the host (as GradientBuckets'
  // buckets). Elsewhere every layer stays gathered from its forward to the step's end, so
  // backward gathers nothing.
  const bool backward_may_gather =
      !device_.is_cuda() || (comms_->data()->starts_from_any_thread() &&
                             comms_->data()->transport() != comm::Transport::kMpi);
  gathering_ = std::make_shared<data_parallel::LayerGathering>(
      std::move(parameters), std::move(chunks), std::move(buckets_of),
      data_parallel::LayerGathering::Options{
          .prefetch = static_cast<int>(config_.zero.prefetch),
          .reshard_after_forward = config_.zero.reshard_after_forward && backward_may_gather});
  module_->set_layer_hooks(gathering_);
}

}  // namespace pipetrain::engine
