#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/autograd/weight_grad_store.h"
#include "pipetrain/comm/transport_choice.h"
#include "pipetrain/data_parallel/gradient_sync.h"
#include "pipetrain/data_parallel/layer_gathering.h"
#include "pipetrain/engine/micro_batch_feed.h"
#include "pipetrain/engine/micro_batch_source.h"
#include "pipetrain/engine/progress_report.h"
#include "pipetrain/engine/stage_link.h"
#include "pipetrain/engine/timers.h"
#include "pipetrain/engine/training_config.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/optim/mixed_precision_optimizer.h"
#include "pipetrain/schedule/pipe_lanes.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/topology/grid.h"

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
    StageLink::OutgoingFilter outgoing;
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
    std::function<module::Activation(int k)> input;
    // On every rank, before each forward pass of k (as infer_each's before_forward).
    std::function<void(int k)> before_forward;
    // On the last stage, after k's forward pass: its outputs at the last position.
    std::function<void(int k, const module::Activation& output)> output;
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
  void record_next_batch() { record_next_ = true; }
  std::vector<InstructionRecord> take_records() { return std::exchange(records_, {}); }

  // Whether train_batch prints DeepSpeed's progress line (a trainer may print its own).
  void set_progress_report(bool on) { report_progress_ = on; }
  // Of the last optimizer step: the global gradient norm (before clipping; NaN unless
  // gradient clipping or set_grad_norm_reporting asked for it) and the rate.
  double last_grad_norm() const { return optimizer_->last_grad_norm(); }
  void set_grad_norm_reporting(bool on) { optimizer_->set_grad_norm_wanted(on); }
  double last_learning_rate() const { return optimizer_->last_learning_rate(); }
  // Mixed precision: the fp32 master copy the optimizer updates for a model parameter
  // (the parameter itself in fp32; stage 0 only), the fp16 loss scale and the steps
  // skipped on overflow.
  const at::Tensor& master_of(const at::Tensor& parameter) const {
    return optimizer_->master_of(parameter);
  }
  const optim::LossScaler& loss_scaler() const { return optimizer_->loss_scaler(); }
  // The weight decay groups: per parameter of the module (parameters() order), whether
  // decay applies to it (config.weight_decay_exempt).
  const std::vector<bool>& weight_decayed() const { return optimizer_->decayed(); }
  optim::LossScaler& loss_scaler() { return optimizer_->loss_scaler(); }
  // Checkpoints: each parameter's fp32 master and optimizer state, whole, in the module's
  // parameter order; restoring them also sets the model's weights. Collective over the
  // data-parallel group under ZeRO (every replica calls them).
  std::vector<optim::ParameterState> whole_optimizer_state() { return optimizer_->whole_state(); }
  // One parameter's, whole on data-parallel rank 0 (see MasterWeights::gathered_state):
  // under ZeRO every replica calls it, for the same positions in the same order.
  optim::ParameterState gathered_optimizer_state(std::size_t position) {
    return optimizer_->gathered_state(position);
  }
  void restore_optimizer_state(const std::vector<optim::ParameterState>& whole) {
    optimizer_->restore(whole);
  }
  // ZeRO stage 3: when each layer's parameters are gathered, and how many are (else null).
  // Outside a step the module's parameters hold no values under stage 3: read them from
  // whole_optimizer_state() or a checkpoint; the module is for this engine alone (its hooks
  // are removed with the engine, its parameters stay without values). On a GPU whose data
  // group is on MPI, layers stay gathered through the step (reshard_after_forward off):
  // backward runs on autograd's thread, which must not start MPI work.
  const data_parallel::LayerGathering* layer_gathering() const { return gathering_.get(); }
  // Bytes of optimizer state and separate fp32 masters on this rank (ZeRO divides them).
  int64_t optimizer_state_bytes() { return optimizer_->state_bytes(); }
  // Whether ZeRO shards the masters and optimizer state among the replicas (then the
  // state methods above are collective over them).
  bool shards_optimizer() const { return optimizer_->sharded(); }
  double loss_scale() const { return optimizer_->loss_scale(); }
  int64_t skipped_steps() const { return loss_scaler().skipped_steps(); }
  // Payload bytes this rank sent and received between stages so far (with partitioned
  // transfers: its shares, not the all-gathered whole; headers not counted).
  int64_t p2p_bytes() const { return link_->bytes(); }

  // Where this rank computes, and how its activations and its data-parallel gradients
  // travel (NCCL between GPUs of their own, else MPI; see Communicators).
  at::Device device() const { return device_; }
  const groups::Communicators& communicators() const { return *comms_; }
  std::string pipe_transports() const { return comms_->pipe_transports(); }
  comm::Transport data_transport() const { return comms_->data_transport(); }
  // The data-parallel gradient buckets (null at data-parallel size 1).
  const data_parallel::GradientBuckets* gradient_buckets() const { return gradients_->buckets(); }

  module::PipelineModule& module() { return *module_; }
  const module::PipelineModule& module() const { return *module_; }
  torch::optim::Optimizer& optimizer() { return optimizer_->optimizer(); }
  const TrainingConfig& config() const { return config_; }
  const topology::Grid& grid() const { return *grid_; }
  // The pipe stage holding the model's last layers, whose outputs (logits, the loss)
  // infer() and eval_batch() return: the last stage, or stage 0 when chunks form a V.
  int output_stage() const { return shape_.stage_of(shape_.virtual_stages() - 1); }
  bool holds_output() const { return grid_->stage_id() == output_stage(); }
  int micro_batches() const { return static_cast<int>(config_.gradient_accumulation_steps); }
  int64_t global_steps() const { return global_steps_; }
  // For checkpoints: continue counting (and scheduling the learning rate) from `steps`.
  void restore_global_steps(int64_t steps) { global_steps_ = steps; }
  // Every stage's plan of a training batch, as this engine runs it.
  schedule::PipelinePlan training_plan() const {
    return plan_of(config_.pipeline.schedule.kind, micro_batches());
  }
  // Most activations this stage held at once (forwarded, not yet back-propagated).
  int peak_live_activations() const { return peak_live_; }
  // Instructions executed so far, for overhead measurements.
  int64_t instructions_executed() const { return instructions_executed_; }
  const InstructionTimers& timers() const { return timers_; }

 private:
  // Buffer ids are per stage, shared by its chunks: an instruction's chunk says whose.
  struct PipeBuffer {
    module::Activation inputs;      // loaded, or received (floating ones require grad)
    bool inputs_handed = false;     // from this rank's other chunk: shared, never refilled
    module::Activation outputs;     // forward results kept for backward
    comm::TensorList output_grads;  // received from the next stage
    comm::TensorList labels;
    at::Tensor loss;  // last stage: this micro-batch's loss, scaled by 1 / micro-batches
    autograd::WeightGradStore weight_grads;  // BackwardInput's, until BackwardWeight
  };

  // A schedule's steps, computed once, and how it runs.
  struct Program {
    std::vector<schedule::Step> steps;
    int buffers = 0;
    bool splits_backward = false;
    SendCompletion sends = SendCompletion::kBlocking;
    // Where the step's last backward passes begin: the first step holding a chunk's last
    // BackwardPass or BackwardInput (-1: none). Gradient buckets may be reduced from here.
    int last_backwards_step = -1;
    bool sends_deferred() const { return sends == SendCompletion::kDeferred; }
  };

  // One execution of a program: what it reads and gathers, alive for that call only.
  // A micro-batch read and not yet taken by every end of the model this rank holds.
  struct Unclaimed {
    MicroBatch batch;
    bool inputs_taken = false;
    bool labels_taken = false;
  };
  struct Run {
    MicroBatchSource* data = nullptr;
    std::vector<module::Activation>* outputs = nullptr;  // the last stage's, when collected
    bool training = false;
    bool splits_backward = false;  // the program's
    int loaded = 0;                // micro-batches
    // Read ahead (per-token loss) or for one virtual stage and still wanted by another on
    // this rank (a V's stage 0 takes the inputs for chunk 0 and the labels for chunk 1), by
    // micro-batch.
    std::map<int, Unclaimed> unclaimed{};
    at::Tensor loss_sum{};
    // With per-token loss: each micro-batch's summed loss is scaled by replicas x
    // micro-batches / tokens counted in the global batch, which the replicas' average of the
    // micro-batches' mean then makes the mean over those tokens.
    bool per_token = false;
    double token_scale = 0;
    double tokens = 0;
    std::optional<std::chrono::steady_clock::time_point> record_origin{};  // when recording
    bool last_position_only = false;            // outputs kept: only the last of dimension 1
    std::function<void(int)> before_forward{};  // infer_streamed's, by micro-batch
    std::function<void(int, const module::Activation&)> after_output{};  // by micro-batch
  };

  // The instruction being executed, described for errors and expired deadlines.
  struct CurrentInstruction : comm::WaitContext {
    int stage = 0;
    int chunks = 1;
    int step = 0;
    schedule::Instruction instruction;
    std::string describe() const override;
  };

  void check_stage() const;
  Program program(schedule::Kind kind, int micro_batches) const;
  // The kind's plan over this engine's stages and chunks (kFile: the config's file),
  // refused if it keeps more micro-batches live than pipeline.max_live.
  schedule::PipelinePlan plan_of(schedule::Kind kind, int micro_batches) const;
  bool is_first_virtual_stage(int chunk) const {
    return shape_.virtual_stage(grid_->stage_id(), chunk) == 0;
  }
  bool is_last_virtual_stage(int chunk) const {
    return shape_.virtual_stage(grid_->stage_id(), chunk) == shape_.virtual_stages() - 1;
  }
  // Returns the sum of the last stage's micro-batch losses (zero elsewhere).
  // Runs `program` once; under NCCL a step that fails leaves its collectives queued, so
  // it fails the job (comm::mark_job_failed) and no later step runs.
  double execute(const Program& program, Run& run);
  double execute_steps(const Program& program, Run& run);
  void run_instruction(int step, const schedule::Instruction& instruction, Run& run);
  void dispatch(const schedule::Instruction& instruction, Run& run);

  void load_micro_batch(PipeBuffer& buffer, const schedule::Instruction& in, Run& run);
  // What the chunk holding `first` / `last` takes of micro-batch `index`: read ahead, or
  // read now (and kept for the other end on this rank when it holds both).
  MicroBatch take_micro_batch(int index, bool first, bool last, Run& run);
  // Per-token loss on the rank holding the labels: reads the step's micro-batches ahead and
  // counts the tokens they count over the data-parallel replicas (run.token_scale).
  void count_tokens(Run& run, int micro_batches);
  void forward(PipeBuffer& buffer, int chunk, Run& run);
  void backward(PipeBuffer& buffer, int chunk, bool defer_weight_grads);
  void backward_weight(PipeBuffer& buffer);
  void send_activation(PipeBuffer& buffer, schedule::Peer peer, int peer_chunk);
  void send_grad(PipeBuffer& buffer, int peer, int peer_chunk);
  void optimizer_step();
  // The output stage's mean loss, averaged over replicas, sent to the pipe with the tokens
  // the loss counted (per-token loss: `run.tokens` on every stage after it).
  double mean_loss(double loss_sum, Run& run);
  // ZeRO stage 3: the module's layers gathered just in time from `parameters`.
  void gather_layers(std::shared_ptr<data_parallel::ShardedParameters> parameters);
  // The communicators' lanes for the plans' `lanes`, and the feedback's from the output
  // stage to the first (generation's tokens) where they differ.
  std::vector<schedule::PipeLane> pipe_lanes(std::vector<schedule::PipeLane> lanes) const;

  std::shared_ptr<module::PipelineModule> module_;
  std::shared_ptr<groups::Communicators> comms_;
  std::shared_ptr<topology::Grid> grid_;
  TrainingConfig config_;
  at::Device device_;
  std::unique_ptr<data_parallel::GradientSync> gradients_;
  std::unique_ptr<optim::MixedPrecisionOptimizer> optimizer_;
  std::shared_ptr<data_parallel::LayerGathering> gathering_;  // ZeRO stage 3 only
  std::unique_ptr<MicroBatchFeed> feed_;
  decltype(Hooks::before) before_instruction_;  // set_hooks'; empty unless a test sets it
  std::unique_ptr<StageLink> link_;
  ProgressReport progress_;
  bool report_progress_ = true;

  schedule::PipeShape shape_;  // of a training batch
  // The pipe's lanes (schedule::pipe_lanes of the three programs below): what a transport
  // matching transfers by order alone carries. Empty where the plans have none.
  std::optional<std::vector<schedule::PipeLane>> lanes_;
  Program train_program_;
  Program eval_program_;
  Program infer_program_;
  std::map<int, Program> infer_each_programs_;  // by micro-batch count, made on first use
  CurrentInstruction current_;
  std::vector<PipeBuffer> buffers_;
  int live_ = 0;
  int peak_live_ = 0;
  int64_t global_steps_ = 0;
  int64_t instructions_executed_ = 0;
  InstructionTimers timers_;
  bool record_next_ = false;
  std::vector<InstructionRecord> records_;
};

}  // namespace pipetrain::engine
