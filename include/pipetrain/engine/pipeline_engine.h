#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/comm/deadline.h"
#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/comm/transport_choice.h"
#include "pipetrain/engine/micro_batch_source.h"
#include "pipetrain/engine/timers.h"
#include "pipetrain/engine/training_config.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/optim/loss_scaler.h"
#include "pipetrain/optim/master_weights.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::data_parallel {
class GradientBuckets;
class LayerGathering;
}  // namespace pipetrain::data_parallel

namespace pipetrain::engine {

// One executed instruction, for timelines (see PipelineEngine::record_next_batch).
struct InstructionRecord {
  int step = 0;  // schedule step
  schedule::Instruction instruction;
  double start_us = 0;  // since the batch began (all ranks start it together)
  double end_us = 0;
  int64_t bytes = 0;  // moved by a send or receive
};

// DeepSpeed's PipelineEngine: runs a stage's schedule instruction by instruction over its
// part of the model, so that a batch of M micro-batches makes the same update as one step
// over the whole batch on one process. Any schedule the schedule layer plans for training
// runs (every training row of schedule::schedule_kinds(), split backward and V placement
// included). The engine is the interpreter; the parts it drives do the rest: the
// MicroBatchFeed reads micro-batches, the StageLink moves activations and gradients
// between stages, data_parallel::GradientSync reduces gradients among tied stages and
// data-parallel replicas, optim::MixedPrecisionOptimizer steps.
class PipelineEngine {
 public:
  // Collective over the grid's world. The module must be built for this rank's stage of
  // grid->pipe_parallel_size() stages; it moves to the device config.device chooses
  // (InputError for "cuda" without a GPU). Batch sizes in `config` are resolved against
  // the grid's data-parallel size (InputError showing the arithmetic if they disagree).
  // Over the job's communicators (the trainer makes them before the model, whose
  // tensor-parallel layers use comms->tensor_group()); the engine connects their tied groups
  // and pipe links (Communicators::connect_tied, connect_pipe).
  PipelineEngine(std::shared_ptr<module::PipelineModule> module,
                 std::shared_ptr<groups::Communicators> comms, TrainingConfig config);
  // As above, with communicators made for `grid` by config.device and config.comm_timeout.
  PipelineEngine(std::shared_ptr<module::PipelineModule> module,
                 std::shared_ptr<topology::Grid> grid, TrainingConfig config);
  ~PipelineEngine();
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;

  // The seam for tests that break things on purpose (see fault_injection.h), off by
  // default: `before` is told of every training instruction before it runs, with the
  // training step (1-based) and a description of where; `outgoing` sees the tensors of
  // every send between stages first and returns what is sent.
  struct Hooks {
    std::function<void(const schedule::Instruction&, int64_t step, const comm::WaitContext&)>
        before;
    std::function<comm::TensorList(const comm::TensorList&)> outgoing;
  };
  void set_hooks(Hooks hooks);

  // One optimizer step over gradient_accumulation_steps micro-batches. The first and last
  // stages read `data` (inputs / labels), and of those only model-parallel rank 0, which
  // broadcasts each micro-batch to its group; other ranks may pass null. Returns the batch
  // loss (mean over micro-batches, averaged over replicas) on every rank.
  double train_batch(MicroBatchSource* data);

  struct EvalResult {
    double loss = 0;
    // With per_token_loss: the tokens the loss counted, over every replica; else 0.
    double tokens = 0;
    // Last stage, when asked for: the model's outputs as this rank computed them (under
    // tensor parallelism, e.g. the GPT's vocabulary slice of the logits).
    std::vector<module::Activation> outputs;
  };
  // Forward only, in eval mode and without autograd.
  EvalResult eval_batch(MicroBatchSource* data, bool return_outputs = false);

  // Forward one micro-batch through the pipeline (eval mode, no autograd, no loss): the
  // first stage feeds `inputs` (its model-parallel rank 0's); returns the model's outputs
  // on the last stage (as eval_batch's), nothing elsewhere. Collective over the pipe and
  // the model-parallel group.
  module::Activation infer(const module::Activation& inputs);
  // Forward one micro-batch per entry of `inputs` through the inference schedule for that
  // many, so they move down the pipe together (stage s runs micro-batch k while stage s + 1
  // runs k - 1). The first stage feeds them; every stage passes as many (the others' may be
  // empty). `before_forward(k)`, if given, runs on this rank before each forward pass of
  // micro-batch k (generation selects that micro-batch's KV cache). Returns the last stage's
  // outputs at each micro-batch's last position (the last index of dimension 1, kept), in
  // micro-batch order, nothing elsewhere. Collective as infer().
  std::vector<module::Activation> infer_each(const std::vector<module::Activation>& inputs,
                                             const std::function<void(int)>& before_forward = {});
  // What a streamed inference asks of its caller, by micro-batch k.
  struct StreamHooks {
    // The first stage's input of k (its model-parallel rank 0's), asked just before k's
    // forward pass, so that it may depend on the outputs of earlier micro-batches.
    std::function<module::Activation(int k)> input{};
    // On every rank, before each forward pass of k (as infer_each's before_forward).
    std::function<void(int k)> before_forward{};
    // On the last stage, after k's forward pass: its outputs at the last position.
    std::function<void(int k, const module::Activation& output)> output{};
  };
  // infer_each over `count` micro-batches whose inputs come from `hooks.input` as the first
  // stage reaches them (generation feeds a prompt's next token as soon as it is drawn).
  // Returns what infer_each returns. Collective as infer().
  std::vector<module::Activation> infer_streamed(int count, const StreamHooks& hooks);
  // Between infer_streamed's hooks: the output stage's `tensors` (e.g. the tokens drawn from
  // its outputs) sent to the first stage, over a lane of their own (NCCL where the pipe's
  // pair of stages has it), posted at once: wait for it before changing them. Received, on
  // the device, by fed_back() at the first stage. Only between two distinct stages.
  comm::PendingSend feed_back(const comm::TensorList& tensors);
  comm::TensorList fed_back();

  // Records every instruction of the next train_batch (collective: the batch then starts
  // with a barrier so all ranks share a time origin); take_records() hands them over.
  void record_next_batch();
  std::vector<InstructionRecord> take_records();

  // Whether train_batch prints DeepSpeed's progress line (a trainer may print its own).
  void set_progress_report(bool on);
  // Of the last optimizer step: the global gradient norm (before clipping; NaN unless
  // gradient clipping or set_grad_norm_reporting asked for it) and the rate.
  double last_grad_norm() const;
  void set_grad_norm_reporting(bool on);
  double last_learning_rate() const;
  // Mixed precision: the fp32 master copy the optimizer updates for a model parameter
  // (the parameter itself in fp32; stage 0 only), the fp16 loss scale and the steps
  // skipped on overflow.
  const at::Tensor& master_of(const at::Tensor& parameter) const;
  const optim::LossScaler& loss_scaler() const;
  optim::LossScaler& loss_scaler();
  // The weight decay groups: per parameter of the module (parameters() order), whether
  // decay applies to it (config.weight_decay_exempt).
  const std::vector<bool>& weight_decayed() const;
  // Checkpoints: each parameter's fp32 master and optimizer state, whole, in the module's
  // parameter order; restoring them also sets the model's weights. Collective over the
  // data-parallel group under ZeRO (every replica calls them).
  std::vector<optim::ParameterState> whole_optimizer_state();
  // One parameter's, whole on data-parallel rank 0 (see MasterWeights::gathered_state):
  // under ZeRO every replica calls it, for the same positions in the same order.
  optim::ParameterState gathered_optimizer_state(std::size_t position);
  void restore_optimizer_state(const std::vector<optim::ParameterState>& whole);
  // ZeRO stage 3: when each layer's parameters are gathered, and how many are (else null).
  // Outside a step the module's parameters hold no values under stage 3: read them from
  // whole_optimizer_state() or a checkpoint; the module is for this engine alone (its hooks
  // are removed with the engine, its parameters stay without values). On a GPU whose data
  // group is on MPI, layers stay gathered through the step (reshard_after_forward off):
  // backward runs on autograd's thread, which must not start MPI work.
  const data_parallel::LayerGathering* layer_gathering() const;
  // Bytes of optimizer state and separate fp32 masters on this rank (ZeRO divides them).
  int64_t optimizer_state_bytes();
  // Whether ZeRO shards the masters and optimizer state among the replicas (then the
  // state methods above are collective over them).
  bool shards_optimizer() const;
  double loss_scale() const;
  int64_t skipped_steps() const;
  // Payload bytes this rank sent and received between stages so far (with partitioned
  // transfers: its shares, not the all-gathered whole; headers not counted).
  int64_t p2p_bytes() const;

  // Where this rank computes, and how its activations and its data-parallel gradients
  // travel (NCCL between GPUs of their own, else MPI; see Communicators).
  at::Device device() const;
  const groups::Communicators& communicators() const;
  std::string pipe_transports() const;
  comm::Transport data_transport() const;
  // The data-parallel gradient buckets (null at data-parallel size 1).
  const data_parallel::GradientBuckets* gradient_buckets() const;

  module::PipelineModule& module();
  const module::PipelineModule& module() const;
  torch::optim::Optimizer& optimizer();
  const TrainingConfig& config() const;
  const topology::Grid& grid() const;
  // The pipe stage holding the model's last layers, whose outputs (logits, the loss)
  // infer() and eval_batch() return: the last stage, or stage 0 when chunks form a V.
  int output_stage() const;
  bool holds_output() const;
  int micro_batches() const;
  int64_t global_steps() const;
  // For checkpoints: continue counting (and scheduling the learning rate) from `steps`.
  void restore_global_steps(int64_t steps);
  // Every stage's plan of a training batch, as this engine runs it.
  schedule::PipelinePlan training_plan() const;
  // Most activations this stage held at once (forwarded, not yet back-propagated).
  int peak_live_activations() const;
  // Instructions executed so far, for overhead measurements.
  int64_t instructions_executed() const;
  const InstructionTimers& timers() const;

 private:
  // The interpreter and the parts it drives (src/engine/engine_state.h): what the engine
  // holds is no part of its interface.
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pipetrain::engine
