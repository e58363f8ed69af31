#include "engine/engine_state.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <exception>
#include <stdexcept>

#include "autograd/released_outputs.h"
#include "comm/job_failure.h"
#include "module/auxiliary_loss.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/validator.h"
#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::engine {
namespace {

using schedule::Instruction;
using schedule::OpKind;
using Clock = std::chrono::steady_clock;

}  // namespace

std::string PipelineEngine::Impl::CurrentInstruction::describe() const {
  std::string text = "stage " + std::to_string(stage) + ", step " + std::to_string(step) + ", " +
                     std::string(schedule::name(instruction.kind));
  if (instruction.buffer >= 0) text += " buffer " + std::to_string(instruction.buffer);
  if (chunks > 1 && schedule::has_buffer(instruction.kind))
    text += ", chunk " + std::to_string(instruction.chunk);
  if (instruction.micro_batch >= 0)
    text += ", micro-batch " + std::to_string(instruction.micro_batch);
  return text;
}

void PipelineEngine::Impl::set_hooks(Hooks hooks) {
  before_instruction_ = std::move(hooks.before);
  link_->set_outgoing_filter(std::move(hooks.outgoing));
}

double PipelineEngine::Impl::train_batch(MicroBatchSource* data) {
  if (!at::GradMode::is_enabled()) {
    throw std::logic_error("train_batch() needs gradients enabled; use eval_batch() to evaluate");
  }
  const auto start = Clock::now();
  module_->train(true);
  Run run{.data = data, .training = true, .per_token = config_.per_token_loss};
  const double loss = mean_loss(execute(train_program_, run), run);
  if (report_progress_) {
    progress_.after_step(global_steps_, loss,
                         std::chrono::duration<double>(Clock::now() - start).count(), timers_);
  }
  return loss;
}

double PipelineEngine::Impl::execute(const Program& program, Run& run) {
  if (comm::job_failed()) {
    throw std::logic_error("a step after a failure with NCCL work queued (" +
                           comm::job_failure_reason() + "): the job must end instead");
  }
  try {
    const double loss_sum = execute_steps(program, run);
    if (gathering_) gathering_->end_step();
    return loss_sum;
  } catch (...) {
    if (comms_->uses_nccl()) comm::mark_job_failed("a step failed with NCCL work queued");
    if (gathering_) gathering_->abandon();
    throw;
  }
}

double PipelineEngine::Impl::execute_steps(const Program& program, Run& run) {
  run.loss_sum = at::zeros({}, at::TensorOptions(at::kDouble).device(device_));
  run.splits_backward = program.splits_backward;
  if (run.per_token) count_tokens(run, micro_batches());
  buffers_.resize(std::max<std::size_t>(buffers_.size(), program.buffers));
  link_->set_send_completion(program.sends);
  link_->forget_hand_overs();  // an earlier step's, left by a failure
  for (auto& buffer : buffers_) buffer.weight_grads.clear();  // after an earlier failure
  if (run.training) gradients_->begin_step();
  if (run.training && std::exchange(record_next_, false)) {
    grid_->world_comm()->barrier();  // a shared time origin
    run.record_origin = Clock::now();
  }
  // Layers' auxiliary losses weigh in the gradients as each micro-batch's loss does.
  std::optional<module::AuxiliaryLossScale> auxiliary_scale;
  if (run.training) auxiliary_scale.emplace(optimizer_->loss_scale() / micro_batches());
  comm::ScopedWaitContext context(current_);
  current_.stage = grid_->stage_id();
  current_.chunks = shape_.chunks;
  const auto& steps = program.steps;
  for (int t = 0; t < static_cast<int>(steps.size()); ++t) {
    if (run.training && t == program.last_backwards_step) gradients_->begin_last_backwards();
    for (const Instruction& in : steps[t]) run_instruction(t, in, run);
  }
  link_->complete_sends();
  return run.loss_sum.item<double>();  // the step's one wait for the device
}

void PipelineEngine::Impl::run_instruction(int step, const Instruction& in, Run& run) {
  current_.step = step;
  current_.instruction = in;
  if (before_instruction_ && run.training) before_instruction_(in, global_steps_ + 1, current_);
  const auto start = Clock::now();
  const int64_t bytes_before = link_->bytes();
  try {
    dispatch(in, run);
  } catch (const comm::DeadlineExceeded&) {
    throw;
  } catch (const io::InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(comm::wait_context() + ": " + io::error_message(e));
  }
  const auto end = Clock::now();
  timers_.add(in.kind, end - start);
  ++instructions_executed_;
  if (!run.record_origin) return;
  auto microseconds = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - *run.record_origin).count();
  };
  records_.push_back(
      {step, in, microseconds(start), microseconds(end), link_->bytes() - bytes_before});
}

void PipelineEngine::Impl::dispatch(const Instruction& in, Run& run) {
  PipeBuffer* buffer = in.buffer >= 0 ? &buffers_.at(in.buffer) : nullptr;
  // The other end, and the channel: named by the receiving chunk (this one's, or the peer's).
  const bool transfer = schedule::is_send(in.kind) || schedule::is_recv(in.kind);
  const schedule::Peer peer =
      transfer ? schedule::transfer_peer(shape_, grid_->stage_id(), in) : schedule::Peer{};
  const int receiving_chunk = schedule::is_recv(in.kind) ? in.chunk : peer.chunk;
  switch (in.kind) {
    case OpKind::kLoadMicroBatch:
      return load_micro_batch(*buffer, in, run);
    case OpKind::kForwardPass:
      if (run.before_forward) run.before_forward(in.micro_batch);
      forward(*buffer, in.chunk, run);
      if (gathering_) gathering_->end_pass();
      if (run.after_output && run.outputs && is_last_virtual_stage(in.chunk))
        run.after_output(in.micro_batch, run.outputs->back());
      return;
    case OpKind::kBackwardPass:
    case OpKind::kBackwardInput:
      backward(*buffer, in.chunk, in.kind == OpKind::kBackwardInput);
      if (gathering_) gathering_->end_pass();
      return gradients_->after_backward();
    case OpKind::kBackwardWeight:
      backward_weight(*buffer);
      return gradients_->after_backward();
    case OpKind::kSendActivation:
      return send_activation(*buffer, peer, receiving_chunk);
    case OpKind::kRecvActivation: {
      // A hand-over shares its sender's storage: never refill it in place.
      const bool handed = peer.stage == grid_->stage_id();
      buffer->inputs = link_->recv(peer.stage, Channel::activations(receiving_chunk),
                                   buffer->inputs_handed ? module::Activation{} : buffer->inputs);
      buffer->inputs_handed = handed;
      return;
    }
    case OpKind::kSendGrad:
      return send_grad(*buffer, peer.stage, receiving_chunk);
    case OpKind::kRecvGrad:
      buffer->output_grads =
          link_->recv(peer.stage, Channel::gradients(receiving_chunk), buffer->output_grads);
      return;
    case OpKind::kReduceTiedGrads:
      return gradients_->reduce_tied();
    case OpKind::kReduceGrads:  // under ZeRO: reduce-scattered onto the optimizer's shards
      return gradients_->reduce_data_parallel();
    case OpKind::kOptimizerStep:
      return optimizer_step();
    default:
      throw std::logic_error("the engine has no handler for " +
                             std::string(schedule::name(in.kind)));
  }
}

void PipelineEngine::Impl::load_micro_batch(PipeBuffer& buffer, const Instruction& in, Run& run) {
  const bool first = is_first_virtual_stage(in.chunk);
  const bool last = is_last_virtual_stage(in.chunk);
  MicroBatch batch = take_micro_batch(in.micro_batch, first, last, run);
  if (first) {
    buffer.inputs = std::move(batch.inputs);
    buffer.inputs_handed = false;
  }
  if (last) buffer.labels = std::move(batch.labels);
}

MicroBatch PipelineEngine::Impl::take_micro_batch(int index, bool first, bool last, Run& run) {
  const MicroBatchFeed::Ends& ends = feed_->ends();
  auto found = run.unclaimed.find(index);
  if (found == run.unclaimed.end()) {
    MicroBatch batch = feed_->next(run.data, run.loaded++, global_steps_);
    // A rank holding both ends on different chunks reads each micro-batch once: chunk 0
    // reads first (its forward comes first); the labels wait for the last chunk.
    if (!(ends.first && ends.last && first != last)) return batch;
    found = run.unclaimed.emplace(index, Unclaimed{std::move(batch)}).first;
  }
  Unclaimed& kept = found->second;
  MicroBatch taken;
  if (first) {
    taken.inputs = std::move(kept.batch.inputs);
    kept.inputs_taken = true;
  }
  if (last) {
    taken.labels = std::move(kept.batch.labels);
    kept.labels_taken = true;
  }
  if ((kept.inputs_taken || !ends.first) && (kept.labels_taken || !ends.last))
    run.unclaimed.erase(found);
  return taken;
}

void PipelineEngine::Impl::count_tokens(Run& run, int micro_batches) {
  at::Tensor tokens = at::zeros({1}, at::kDouble);
  if (feed_->ends().last) {
    at::Tensor counted = at::zeros({}, at::TensorOptions(at::kLong).device(device_));
    for (int m = 0; m < micro_batches; ++m) {
      MicroBatch batch = feed_->next(run.data, run.loaded++, global_steps_);
      counted += (batch.labels.at(0) != tensor_parallel::kIgnoreIndex).sum();
      run.unclaimed.emplace(m, Unclaimed{std::move(batch)});
    }
    tokens.fill_(counted.item<int64_t>());  // one wait for the device
    // Context-parallel ranks share their samples: the replicas that read others are data's.
    grid_->data_comm()->all_reduce(tokens, comm::ReduceOp::kSum);
  }
  run.tokens = tokens.item<double>();
  const double replicas = grid_->replica_comm()->size();
  run.token_scale = run.tokens > 0 ? replicas * micro_batches / run.tokens : 0.0;
}

void PipelineEngine::Impl::forward(PipeBuffer& buffer, int chunk, Run& run) {
  {
    std::optional<autograd::SplittableBackward> splittable;
    if (run.training && run.splits_backward) splittable.emplace();
    buffer.outputs = module_->forward(buffer.inputs, chunk);
  }
  if (run.training) peak_live_ = std::max(peak_live_, ++live_);
  if (!is_last_virtual_stage(chunk)) return;
  if (run.outputs) {  // handed to the caller in host memory
    module::Activation& kept = run.outputs->emplace_back();
    for (const auto& t : buffer.outputs) {
      const bool narrow = run.last_position_only && t.dim() >= 2;
      kept.push_back((narrow ? t.narrow(1, t.size(1) - 1, 1) : t).detach().to(at::kCPU));
    }
  }
  if (buffer.labels.empty()) return;  // infer(): outputs only
  module::Activation outputs = buffer.outputs;
  for (auto& t : outputs) {
    if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat)
      t = t.to(at::kFloat);  // the loss in fp32
  }
  const at::Tensor loss = run.per_token
                              ? module_->token_loss(outputs, buffer.labels) * run.token_scale
                              : module_->loss(outputs, buffer.labels);
  buffer.outputs.clear();  // the loss's graph holds what backward needs
  run.loss_sum += loss.detach().to(at::kDouble);
  // Each micro-batch carries 1/M of the batch's gradient (times the fp16 loss scale).
  if (run.training) buffer.loss = loss * (optimizer_->loss_scale() / micro_batches());
}

// BackwardInput (`defer_weight_grads`) leaves the weight gradients of linear layers in the
// buffer's store for its BackwardWeight; the activation stays live until then.
void PipelineEngine::Impl::backward(PipeBuffer& buffer, int chunk, bool defer_weight_grads) {
  std::optional<autograd::DeferWeightGrads> deferring;
  if (defer_weight_grads) deferring.emplace(buffer.weight_grads);
  if (is_last_virtual_stage(chunk)) {
    buffer.loss.backward();
  } else {
    comm::TensorList outputs;
    for (const auto& t : buffer.outputs) {
      if (at::isFloatingType(t.scalar_type()) && t.requires_grad()) outputs.push_back(t);
    }
    if (outputs.size() != buffer.output_grads.size()) {
      throw std::runtime_error("received " + std::to_string(buffer.output_grads.size()) +
                               " gradients for " + std::to_string(outputs.size()) +
                               " outputs that need one");
    }
    autograd::backward_from(outputs, buffer.output_grads);  // their values may be released
  }
  buffer.outputs.clear();
  buffer.output_grads.clear();
  buffer.loss = at::Tensor();
  if (!defer_weight_grads) --live_;
}

void PipelineEngine::Impl::backward_weight(PipeBuffer& buffer) {
  buffer.weight_grads.run();
  --live_;
}

void PipelineEngine::Impl::send_activation(PipeBuffer& buffer, schedule::Peer peer,
                                           int peer_chunk) {
  if (peer.stage == grid_->stage_id()) {
    // Handed over, the outputs are shared with the receiving chunk's inputs; a forward
    // may return its inputs, so they are not refilled in place either.
    buffer.inputs_handed = true;
    return link_->send(buffer.outputs, peer.stage, Channel::activations(peer_chunk));
  }
  link_->send(buffer.outputs, peer.stage, Channel::activations(peer_chunk));
  // Sent, the outputs' values are the receiver's: backward needs only their graph (the
  // send in flight holds the storage until it completes).
  for (auto& t : buffer.outputs) autograd::release_values(t);
}

void PipelineEngine::Impl::send_grad(PipeBuffer& buffer, int peer, int peer_chunk) {
  comm::TensorList grads;
  for (const auto& input : buffer.inputs) {
    if (!input.requires_grad()) continue;
    grads.push_back(input.grad().defined() ? input.grad() : at::zeros_like(input));
  }
  link_->send(grads, peer, Channel::gradients(peer_chunk));
}

void PipelineEngine::Impl::optimizer_step() {
  if (gathering_) gathering_->end_step();  // the layers kept for the step's passes
  optimizer_->step(global_steps_);
  ++global_steps_;
}

double PipelineEngine::Impl::mean_loss(double loss_sum, Run& run) {
  // The output stage's mean over micro-batches, averaged over replicas (each context-parallel
  // rank's over its equal share of the tokens; per-token loss: scaled to the tokens' mean).
  at::Tensor loss = at::zeros({1}, at::kDouble);
  if (holds_output()) {
    loss.fill_(loss_sum / micro_batches());
    grid_->replica_comm()->all_reduce(loss, comm::ReduceOp::kAverage);
  }
  grid_->pipe_comm()->broadcast(loss, output_stage());
  if (run.per_token) {  // the tokens counted, to every stage
    at::Tensor tokens = at::full({1}, run.tokens, at::kDouble);
    grid_->pipe_comm()->broadcast(tokens, output_stage());
    run.tokens = tokens.item<double>();
  }
  return loss.item<double>();
}

}  // namespace pipetrain::engine
