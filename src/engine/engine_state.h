#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/weight_grad_store.h"
#include "data_parallel/gradient_sync.h"
#include "data_parallel/layer_gathering.h"
#include "engine/micro_batch_feed.h"
#include "engine/progress_report.h"
#include "engine/stage_link.h"
#include "optim/mixed_precision_optimizer.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/schedule/pipe_lanes.h"

namespace pipetrain::engine {

// What a PipelineEngine holds and how it runs: the interpreter (pipeline_engine.cpp), how
// it is built (engine_setup.cpp), its programs (programs.cpp) and evaluation
// (evaluation.cpp). PipelineEngine's methods forward here (engine_interface.cpp).
class PipelineEngine::Impl {
 public:
  using EvalResult = PipelineEngine::EvalResult;
  using Hooks = PipelineEngine::Hooks;
  using StreamHooks = PipelineEngine::StreamHooks;

  Impl(std::shared_ptr<module::PipelineModule> module, std::shared_ptr<groups::Communicators> comms,
       TrainingConfig config);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void set_hooks(Hooks hooks);
  double train_batch(MicroBatchSource* data);
  EvalResult eval_batch(MicroBatchSource* data, bool return_outputs);
  module::Activation infer(const module::Activation& inputs);
  std::vector<module::Activation> infer_streamed(int count, const StreamHooks& hooks);
  comm::PendingSend feed_back(const comm::TensorList& tensors);
  comm::TensorList fed_back();

  int output_stage() const { return shape_.stage_of(shape_.virtual_stages() - 1); }
  bool holds_output() const { return grid_->stage_id() == output_stage(); }
  int micro_batches() const { return static_cast<int>(config_.gradient_accumulation_steps); }
  // The kind's plan over this engine's stages and chunks (kFile: the config's file),
  // refused if it keeps more micro-batches live than pipeline.max_live.
  schedule::PipelinePlan plan_of(schedule::Kind kind, int micro_batches) const;

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
