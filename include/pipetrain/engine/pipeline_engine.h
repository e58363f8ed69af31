#pragma once

#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/config/training_config.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/fault_injection.h"
#include "pipetrain/engine/timers.h"
#include "pipetrain/grid.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/optim/loss_scaler.h"
#include "pipetrain/optim/optimizer.h"
#include "pipetrain/schedule/schedule.h"

namespace pipetrain {

// DeepSpeed's PipelineEngine: runs a stage's schedule instruction by instruction over its
// part of the model, moving activations and gradients between stages and reducing
// gradients among data-parallel replicas, so that a batch of M micro-batches makes the
// same update as one step over the whole batch on one process.
// One executed instruction, for timelines (see PipelineEngine::record_next_batch).
struct InstructionRecord {
  int step = 0;  // schedule step
  schedule::Instruction instruction;
  double start_us = 0;  // since the batch began (all ranks start it together)
  double end_us = 0;
  int64_t bytes = 0;  // moved by a send or receive
};

class PipelineEngine {
 public:
  // Collective over the grid's world. The module must be built for this rank's stage of
  // grid->pipe_parallel_size() stages. Batch sizes in `config` are resolved against the
  // grid's data-parallel size (InputError showing the arithmetic if they disagree).
  PipelineEngine(std::shared_ptr<PipelineModule> module, std::shared_ptr<Grid> grid,
                 TrainingConfig config);

  // One optimizer step over gradient_accumulation_steps micro-batches. The first and last
  // stages read `data` (inputs / labels), and of those only model-parallel rank 0, which
  // broadcasts each micro-batch to its group; other ranks may pass null. Returns the batch
  // loss (mean over micro-batches, averaged over replicas) on every rank.
  double train_batch(MicroBatchSource* data);

  struct EvalResult {
    double loss = 0;
    // Last stage, when asked for: the model's outputs as this rank computed them (under
    // tensor parallelism, e.g. the GPT's vocabulary slice of the logits).
    std::vector<Activation> outputs;
  };
  // Forward only, in eval mode and without autograd.
  EvalResult eval_batch(MicroBatchSource* data, bool return_outputs = false);

  // Forward one micro-batch through the pipeline (eval mode, no autograd, no loss): the
  // first stage feeds `inputs` (its model-parallel rank 0's); returns the model's outputs
  // on the last stage (as eval_batch's), nothing elsewhere. Collective over the pipe and
  // the model-parallel group.
  Activation infer(const Activation& inputs);

  // Records every instruction of the next train_batch (collective: the batch then starts
  // with a barrier so all ranks share a time origin); take_records() hands them over.
  void record_next_batch() { record_next_ = true; }
  std::vector<InstructionRecord> take_records() { return std::exchange(records_, {}); }

  // Whether train_batch prints DeepSpeed's progress line (a trainer may print its own).
  void set_progress_report(bool on) { report_progress_ = on; }
  // Of the last optimizer step: the global gradient norm (before clipping) and the rate.
  double last_grad_norm() const { return last_grad_norm_; }
  // Mixed precision: the fp32 master copy the optimizer updates for a model parameter
  // (the parameter itself in fp32), the fp16 loss scale and the steps skipped on overflow.
  const at::Tensor& master_of(const at::Tensor& parameter) const;
  const LossScaler& loss_scaler() const { return loss_scaler_; }
  LossScaler& loss_scaler() { return loss_scaler_; }
  // After the masters changed (a checkpoint load): the model takes their values.
  void copy_masters_to_model();
  double loss_scale() const { return loss_scaler_.scale(); }
  int64_t skipped_steps() const { return loss_scaler_.skipped_steps(); }
  // Payload bytes this rank sent and received between stages so far (with partitioned
  // transfers: its shares, not the all-gathered whole; headers not counted).
  int64_t p2p_bytes() const { return p2p_bytes_; }
  double last_learning_rate() const { return last_learning_rate_; }

  PipelineModule& module() { return *module_; }
  const PipelineModule& module() const { return *module_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const TrainingConfig& config() const { return config_; }
  const Grid& grid() const { return *grid_; }
  int micro_batches() const { return static_cast<int>(config_.gradient_accumulation_steps); }
  int64_t global_steps() const { return global_steps_; }
  // For checkpoints: continue counting (and scheduling the learning rate) from `steps`.
  void restore_global_steps(int64_t steps) { global_steps_ = steps; }
  // Most activations this stage held at once (forwarded, not yet back-propagated).
  int peak_live_activations() const { return peak_live_; }
  // Instructions executed so far, for overhead measurements.
  int64_t instructions_executed() const { return instructions_executed_; }
  const InstructionTimers& timers() const { return timers_; }

 private:
  struct PipeBuffer {
    Activation inputs;        // loaded, or received (floating ones require grad)
    Activation outputs;       // forward results kept for backward
    Activation output_grads;  // received from the next stage
    Activation labels;
    at::Tensor loss;  // last stage: this micro-batch's loss, scaled by 1 / micro-batches
    int micro_batch = -1;
  };

  // A schedule's steps, computed once.
  struct Program {
    std::vector<schedule::Step> steps;
    int buffers = 0;
    static Program of(const schedule::Schedule& schedule);
  };

  // The instruction being executed, described for errors and expired deadlines.
  struct CurrentInstruction : comm::WaitContext {
    int stage = 0;
    int step = 0;
    schedule::Instruction instruction;
    std::string describe() const override;
  };

  void connect_tied_layers();
  void prepare_precision();
  // Moves gradients onto the fp32 masters (unscaled); whether any rank overflowed.
  bool gather_master_grads();
  void execute(const Program& program, MicroBatchSource* data);
  void dispatch(const schedule::Instruction& instruction);

  void load_micro_batch(PipeBuffer& buffer);
  MicroBatch next_micro_batch();
  void forward(PipeBuffer& buffer);
  void backward(PipeBuffer& buffer);
  void send_activation(PipeBuffer& buffer);
  void recv_activation(PipeBuffer& buffer);
  void send_grad(PipeBuffer& buffer);
  void recv_grad(PipeBuffer& buffer);
  // Moves tensors between neighbouring stages, as 1/model-size shares when partitioned.
  bool partitioned_transfers() const;
  void send_to_stage(const Activation& tensors, int stage, int tag);
  Activation recv_from_stage(int stage, int tag, const Activation& reuse);
  void reduce_tied_grads();
  void reduce_grads();
  void optimizer_step();

  double aggregate_loss();
  // The tensors to send: themselves, or broken as an injected fault asks.
  Activation faulty(const Activation& tensors);
  double global_grad_norm();
  void report(double loss, double seconds);

  std::shared_ptr<PipelineModule> module_;
  std::shared_ptr<Grid> grid_;
  TrainingConfig config_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  LrSchedule lr_schedule_;
  std::unique_ptr<comm::TensorTransport> transport_;
  std::map<std::string, std::shared_ptr<comm::MpiCommunicator>> tied_comms_;
  // The parameters whose gradients this stage counts in the global norm: all but tied
  // tensors whose first owner is another stage.
  std::vector<at::Tensor> norm_parameters_;  // masters
  at::ScalarType dtype_ = at::kFloat;
  // (model parameter, fp32 master) pairs; both the same tensor in fp32.
  std::vector<std::pair<at::Tensor, at::Tensor>> masters_;
  LossScaler loss_scaler_;
  int64_t p2p_bytes_ = 0;
  std::optional<FaultPlan> fault_;  // PIPETRAIN_FAULT, for tests
  std::string next_send_fault_;     // "reshape" or "retype" while one is pending
  bool overflow_fault_ = false;     // an inf in this step's gradients, while pending

  Program train_program_;
  Program eval_program_;
  Program infer_program_;
  CurrentInstruction current_;
  std::vector<PipeBuffer> buffers_;
  std::vector<at::Tensor> reduce_buckets_;
  MicroBatchSource* data_ = nullptr;
  std::vector<Activation>* collected_outputs_ = nullptr;  // eval_batch(..., true), last stage
  at::Tensor total_loss_;
  bool training_ = true;
  int micro_batches_loaded_ = 0;
  int live_ = 0;
  int peak_live_ = 0;
  int64_t global_steps_ = 0;
  int64_t instructions_executed_ = 0;
  InstructionTimers timers_;
  double seconds_since_report_ = 0;
  bool report_progress_ = true;
  bool record_next_ = false;
  bool recording_ = false;
  std::vector<InstructionRecord> records_;
  int64_t bytes_moved_ = 0;  // by the instruction being executed
  double last_grad_norm_ = 0;
  double last_learning_rate_ = 0;
};

}  // namespace pipetrain
