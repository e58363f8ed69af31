#include "engine/engine_state.h"

#include <ATen/ATen.h>

#include <stdexcept>

// Evaluation and inference: the inference schedule over a batch, one input, or a stream of
// inputs fed as the pipe asks for them (generation).
namespace pipetrain::engine {
namespace {

// Eval mode without autograd for a scope; training mode again when it ends, thrown or not.
class Evaluating {
 public:
  explicit Evaluating(module::PipelineModule& module) : module_(module) { module_.train(false); }
  ~Evaluating() { module_.train(true); }
  Evaluating(const Evaluating&) = delete;
  Evaluating& operator=(const Evaluating&) = delete;

 private:
  module::PipelineModule& module_;
  at::NoGradGuard no_grad_;
};

}  // namespace

PipelineEngine::Impl::EvalResult PipelineEngine::Impl::eval_batch(MicroBatchSource* data,
                                                                  bool return_outputs) {
  EvalResult result;
  Run run{.data = data,
          .outputs = return_outputs ? &result.outputs : nullptr,
          .per_token = config_.per_token_loss};
  double loss_sum = 0;
  {
    const Evaluating evaluating(*module_);
    loss_sum = execute(eval_program_, run);
  }
  result.loss = mean_loss(loss_sum, run);
  result.tokens = run.tokens;
  return result;
}

module::Activation PipelineEngine::Impl::infer(const module::Activation& inputs) {
  // One micro-batch through the inference schedule; the first stage feeds `inputs`.
  class Once : public MicroBatchSource {
   public:
    explicit Once(const module::Activation& inputs) : inputs_(inputs) {}
    MicroBatch next() override { return {inputs_, {}}; }

   private:
    module::Activation inputs_;
  } once(inputs);
  std::vector<module::Activation> outputs;
  Run run{.data = &once, .outputs = &outputs};
  {
    const Evaluating evaluating(*module_);
    execute(infer_program_, run);
  }
  return outputs.empty() ? module::Activation{} : outputs.front();
}

std::vector<module::Activation> PipelineEngine::Impl::infer_streamed(int count,
                                                                     const StreamHooks& hooks) {
  // The micro-batches in order, to whichever stage loads them, each asked for when loaded.
  class Streamed : public MicroBatchSource {
   public:
    explicit Streamed(const std::function<module::Activation(int)>& input) : input_(input) {}
    MicroBatch next() override { return {input_(next_++), {}}; }

   private:
    const std::function<module::Activation(int)>& input_;
    int next_ = 0;
  } streamed(hooks.input);
  if (count == 0) return {};
  auto program = infer_each_programs_.find(count);
  if (program == infer_each_programs_.end()) {
    Program made = this->program(schedule::Kind::kInference, count);
    // The pipe's lanes were laid for the constructor's plans.
    if (comms_->pipe_uses_nccl() &&
        !(lanes_ && schedule::lanes_carry(*lanes_, plan_of(schedule::Kind::kInference, count)))) {
      throw std::logic_error("the inference plan for " + std::to_string(count) +
                             " micro-batches does not keep each pair's transfers in order");
    }
    program = infer_each_programs_.emplace(count, std::move(made)).first;
  }
  std::vector<module::Activation> outputs;
  Run run{.data = &streamed,
          .outputs = &outputs,
          .last_position_only = true,
          .before_forward = hooks.before_forward,
          .after_output = hooks.output};
  {
    const Evaluating evaluating(*module_);
    execute(program->second, run);
  }
  return outputs;
}

comm::PendingSend PipelineEngine::Impl::feed_back(const comm::TensorList& tensors) {
  const int first = shape_.stage_of(0);
  if (!holds_output() || grid_->stage_id() == first)
    throw std::logic_error("feed_back: only the output stage feeds another first stage");
  comm::TensorList on_device;
  for (const at::Tensor& t : tensors) on_device.push_back(t.to(device_));
  return link_->feed_back(on_device, first);
}

comm::TensorList PipelineEngine::Impl::fed_back() {
  if (grid_->stage_id() != shape_.stage_of(0) || holds_output())
    throw std::logic_error("fed_back: only a first stage apart from the output stage is fed");
  return link_->fed_back(output_stage());
}

}  // namespace pipetrain::engine
