#include "pipetrain/engine/pipeline_engine.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>

#include "pipetrain/comm/nccl_communicator.h"
#include "pipetrain/comm/partitioned_transfer.h"
#include "pipetrain/engine/fault_injection.h"
#include "pipetrain/errors.h"
#include "pipetrain/schedule/deepspeed_schedules.h"

namespace pipetrain {
namespace {

using schedule::Instruction;
using schedule::OpKind;
using Clock = std::chrono::steady_clock;

constexpr int kActivationTag = 1;
constexpr int kGradTag = 2;

bool is_floating(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type());
}

int64_t byte_size(const Activation& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.numel() * t.element_size();
  return bytes;
}

}  // namespace

std::string PipelineEngine::CurrentInstruction::describe() const {
  std::string text = "stage " + std::to_string(stage) + ", step " + std::to_string(step) + ", " +
                     std::string(schedule::name(instruction.kind));
  if (instruction.buffer >= 0) text += " buffer " + std::to_string(instruction.buffer);
  if (instruction.micro_batch >= 0)
    text += ", micro-batch " + std::to_string(instruction.micro_batch);
  return text;
}

PipelineEngine::Program PipelineEngine::Program::of(const schedule::Schedule& schedule) {
  return {schedule.steps(), schedule.num_pipe_buffers()};
}

PipelineEngine::PipelineEngine(std::shared_ptr<PipelineModule> module, std::shared_ptr<Grid> grid,
                               TrainingConfig config)
    : module_(std::move(module)),
      grid_(std::move(grid)),
      config_(std::move(config)),
      loss_scaler_(config_.precision.dtype == "fp16" ? config_.precision.loss_scaler
                                                     : LossScalerConfig{.loss_scale = 1}) {
  resolve_batch(config_, grid_->data_parallel_size());
  if (grid_->global_rank() == 0) {
    for (const auto& key : config_.unknown_keys)
      std::fprintf(stderr, "pipetrain: warning: unknown config key %s\n", key.c_str());
  }
  const auto& options = module_->options();
  if (options.stages != grid_->pipe_parallel_size() || options.stage_id != grid_->stage_id()) {
    throw InputError("the module is built for stage " + std::to_string(options.stage_id) + " of " +
                     std::to_string(options.stages) + ", but this rank is stage " +
                     std::to_string(grid_->stage_id()) + " of " +
                     std::to_string(grid_->pipe_parallel_size()));
  }
  fault_ = fault_plan_from_environment();
  prepare_precision();
  std::vector<at::Tensor> masters;
  for (const auto& [parameter, master] : masters_) masters.push_back(master);
  optimizer_ = make_optimizer(config_.optimizer, masters);
  lr_schedule_ = make_lr_schedule(config_.scheduler, base_learning_rate(config_.optimizer));
  if (config_.comm_timeout > 0) {
    for (const auto& comm :
         {grid_->pipe_comm(), grid_->data_comm(), grid_->model_comm(), grid_->world_comm()}) {
      comm->set_timeout(comm::Seconds(config_.comm_timeout));
    }
  }
  transport_ = std::make_unique<comm::TensorTransport>(
      grid_->pipe_comm(), comm::communicator_for(grid_->pipe_comm(), at::kCPU));

  connect_tied_layers();
  // The schedules depend only on the shape: built once, executed every batch.
  const schedule::PipeShape shape{micro_batches(), grid_->pipe_parallel_size()};
  train_program_ = Program::of(schedule::TrainSchedule(shape, grid_->stage_id()));
  eval_program_ = Program::of(schedule::InferenceSchedule(shape, grid_->stage_id()));
  infer_program_ = Program::of(schedule::InferenceSchedule({1, shape.stages}, grid_->stage_id()));
}

void PipelineEngine::prepare_precision() {
  const std::string& dtype = config_.precision.dtype;
  dtype_ = dtype == "bf16" ? at::kBFloat16 : dtype == "fp16" ? at::kHalf : at::kFloat;
  if (dtype_ != at::kFloat) module_->to(dtype_);
  for (const auto& p : module_->parameters()) {
    masters_.emplace_back(
        p, dtype_ == at::kFloat ? p : p.detach().to(at::kFloat).clone().requires_grad_(true));
  }
}

void PipelineEngine::copy_masters_to_model() {
  at::NoGradGuard no_grad;
  for (auto& [parameter, master] : masters_) {
    if (!master.is_same(parameter)) parameter.copy_(master);
  }
}

const at::Tensor& PipelineEngine::master_of(const at::Tensor& parameter) const {
  for (const auto& [p, master] : masters_) {
    if (p.is_same(parameter)) return master;
  }
  throw std::invalid_argument("not a parameter of this engine's module");
}

void PipelineEngine::connect_tied_layers() {
  // Tied layers on several stages: one communicator per key among the owners that share
  // this rank's data and model coordinates. Splitting is collective, so every rank takes
  // part for every key, owners or not.
  std::vector<at::Tensor> excluded;
  std::map<std::string, bool> seen;
  for (const auto& spec : module_->specs()) {
    if (!spec.tied() || seen[spec.tie_key]) continue;
    seen[spec.tie_key] = true;
    const auto owners = module_->tie_owner_stages(spec.tie_key);
    if (owners.size() < 2) continue;
    const bool owner = std::find(owners.begin(), owners.end(), grid_->stage_id()) != owners.end();
    const int group =
        1 + grid_->data_parallel_id() * grid_->model_parallel_size() + grid_->model_parallel_id();
    auto comm = grid_->world_comm()->split(owner ? group : 0, grid_->global_rank());
    if (!owner) continue;
    comm->set_timeout(grid_->pipe_comm()->timeout());
    tied_comms_[spec.tie_key] = comm;
    if (owners.front() != grid_->stage_id()) {
      for (const auto& p : module_->tied_parameters(spec.tie_key)) excluded.push_back(p);
    }
  }
  // Tensor parallelism: shards count on every rank of the group, replicated tensors
  // (LayerNorms, row-parallel biases, positions) on its first rank only.
  const auto shards = module_->shard_layouts();
  const bool counts_replicated = grid_->model_parallel_id() == 0;
  for (const auto& [name, p] : module_->named_parameters()) {
    const bool skip = std::any_of(excluded.begin(), excluded.end(),
                                  [&](const at::Tensor& e) { return e.is_same(p); });
    if (!skip && (counts_replicated || shards.count(name)))
      norm_parameters_.push_back(master_of(p));
  }
}

double PipelineEngine::train_batch(MicroBatchSource* data) {
  if (!at::GradMode::is_enabled()) {
    throw std::logic_error("train_batch() needs gradients enabled; use eval_batch() to evaluate");
  }
  const auto start = Clock::now();
  training_ = true;
  module_->train(true);
  execute(train_program_, data);
  const double loss = aggregate_loss();
  seconds_since_report_ += std::chrono::duration<double>(Clock::now() - start).count();
  if (report_progress_ && global_steps_ % config_.steps_per_print == 0) {
    report(loss, seconds_since_report_);
    seconds_since_report_ = 0;
  }
  return loss;
}

PipelineEngine::EvalResult PipelineEngine::eval_batch(MicroBatchSource* data, bool return_outputs) {
  training_ = false;
  module_->train(false);
  EvalResult result;
  collected_outputs_ = return_outputs && grid_->is_last_stage() ? &result.outputs : nullptr;
  {
    at::NoGradGuard no_grad;
    execute(eval_program_, data);
  }
  collected_outputs_ = nullptr;
  result.loss = aggregate_loss();
  module_->train(true);
  return result;
}

Activation PipelineEngine::infer(const Activation& inputs) {
  // One micro-batch through the inference schedule; the first stage feeds `inputs`.
  class Once : public MicroBatchSource {
   public:
    explicit Once(const Activation& inputs) : inputs_(inputs) {}
    MicroBatch next() override { return {inputs_, {}}; }

   private:
    Activation inputs_;
  } once(inputs);
  training_ = false;
  module_->train(false);
  std::vector<Activation> outputs;
  collected_outputs_ = &outputs;
  {
    at::NoGradGuard no_grad;
    execute(infer_program_, &once);
  }
  collected_outputs_ = nullptr;
  module_->train(true);
  return outputs.empty() ? Activation{} : outputs.front();
}

void PipelineEngine::execute(const Program& program, MicroBatchSource* data) {
  data_ = data;
  micro_batches_loaded_ = 0;
  total_loss_ = at::zeros({}, at::kDouble);
  buffers_.resize(std::max<std::size_t>(buffers_.size(), program.buffers));
  recording_ = std::exchange(record_next_, false);
  if (recording_) grid_->world_comm()->barrier();  // a shared time origin
  const auto origin = Clock::now();
  auto microseconds = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  comm::ScopedWaitContext context(current_);
  current_.stage = grid_->stage_id();
  const auto& steps = program.steps;
  for (int t = 0; t < static_cast<int>(steps.size()); ++t) {
    for (const Instruction& in : steps[t]) {
      current_.step = t;
      current_.instruction = in;
      if (fault_ && fault_->rank == grid_->global_rank() && fault_->instruction == in.kind &&
          fault_->step == global_steps_ + 1 && training_) {
        inject_fault(*fault_, current_.describe());
        if (fault_->action == "reshape" || fault_->action == "retype")
          next_send_fault_ = fault_->action;
        overflow_fault_ = fault_->action == "overflow";
      }
      const auto start = Clock::now();
      bytes_moved_ = 0;
      try {
        dispatch(in);
      } catch (const comm::DeadlineExceeded&) {
        throw;
      } catch (const InputError&) {
        throw;
      } catch (const std::exception& e) {
        throw std::runtime_error(comm::wait_context() + ": " + error_message(e));
      }
      const auto end = Clock::now();
      timers_.add(in.kind, end - start);
      if (recording_) {
        records_.push_back({t, in, microseconds(start), microseconds(end), bytes_moved_});
      }
      p2p_bytes_ += bytes_moved_;
      ++instructions_executed_;
    }
  }
  recording_ = false;
  data_ = nullptr;
}

void PipelineEngine::dispatch(const Instruction& in) {
  PipeBuffer* buffer = in.buffer >= 0 ? &buffers_.at(in.buffer) : nullptr;
  if (buffer) buffer->micro_batch = in.micro_batch;
  switch (in.kind) {
    case OpKind::kLoadMicroBatch:
      return load_micro_batch(*buffer);
    case OpKind::kForwardPass:
      return forward(*buffer);
    case OpKind::kBackwardPass:
      return backward(*buffer);
    case OpKind::kSendActivation:
      return send_activation(*buffer);
    case OpKind::kRecvActivation:
      return recv_activation(*buffer);
    case OpKind::kSendGrad:
      return send_grad(*buffer);
    case OpKind::kRecvGrad:
      return recv_grad(*buffer);
    case OpKind::kReduceTiedGrads:
      return reduce_tied_grads();
    case OpKind::kReduceGrads:
      return reduce_grads();
    case OpKind::kOptimizerStep:
      return optimizer_step();
    default:
      throw std::logic_error("the engine has no handler for " +
                             std::string(schedule::name(in.kind)));
  }
}

void PipelineEngine::load_micro_batch(PipeBuffer& buffer) {
  // Under tensor parallelism only the group's first rank reads; the others receive its
  // batch (or learn that it had none, rather than wait for one).
  std::optional<Activation> inputs, labels;
  std::exception_ptr failure;
  if (grid_->model_parallel_id() == 0) {
    try {
      MicroBatch batch = next_micro_batch();
      inputs = std::move(batch.inputs);
      labels = std::move(batch.labels);
    } catch (const std::exception&) {
      if (grid_->model_parallel_size() == 1) throw;
      failure = std::current_exception();
    }
  }
  if (grid_->model_parallel_size() > 1) {
    auto& group = *grid_->model_comm();
    if (grid_->is_first_stage()) inputs = comm::broadcast_tensors(group, inputs, 0);
    if (grid_->is_last_stage()) labels = comm::broadcast_tensors(group, labels, 0);
    if (failure) std::rethrow_exception(failure);
    if (!inputs && !labels) {
      throw std::runtime_error("model-parallel rank 0 (rank " +
                               std::to_string(group.global_rank(0)) +
                               ") had no micro-batch to share");
    }
  }
  ++micro_batches_loaded_;
  if (grid_->is_first_stage()) {
    buffer.inputs = std::move(*inputs);
    for (auto& t : buffer.inputs) {
      if (is_floating(t) && t.scalar_type() != dtype_) t = t.to(dtype_);
    }
  }
  if (grid_->is_last_stage()) buffer.labels = std::move(*labels);
}

MicroBatch PipelineEngine::next_micro_batch() {
  if (!data_)
    throw std::logic_error("stage " + std::to_string(grid_->stage_id()) +
                           " needs data but got none");
  try {
    return data_->next();
  } catch (const DataExhausted&) {
    throw std::runtime_error("the data ran out at micro-batch " +
                             std::to_string(micro_batches_loaded_) + " of step " +
                             std::to_string(global_steps_) +
                             " (wrap the loader in a RepeatingLoader to train for longer)");
  }
}

void PipelineEngine::forward(PipeBuffer& buffer) {
  buffer.outputs = module_->forward(buffer.inputs);
  if (training_) peak_live_ = std::max(peak_live_, ++live_);
  if (!grid_->is_last_stage()) return;
  if (collected_outputs_) collected_outputs_->push_back(buffer.outputs);
  if (buffer.labels.empty()) return;  // infer(): outputs only
  Activation outputs = buffer.outputs;
  for (auto& t : outputs) {
    if (is_floating(t) && t.scalar_type() != at::kFloat) t = t.to(at::kFloat);  // the loss in fp32
  }
  const at::Tensor loss = module_->loss(outputs, buffer.labels);
  total_loss_ += loss.detach().to(at::kDouble);
  // Each micro-batch carries 1/M of the batch's gradient (times the fp16 loss scale).
  if (training_) buffer.loss = loss * (loss_scaler_.scale() / micro_batches());
}

void PipelineEngine::backward(PipeBuffer& buffer) {
  if (grid_->is_last_stage()) {
    buffer.loss.backward();
  } else {
    Activation outputs;
    for (const auto& t : buffer.outputs) {
      if (is_floating(t) && t.requires_grad()) outputs.push_back(t);
    }
    if (outputs.size() != buffer.output_grads.size()) {
      throw std::runtime_error("received " + std::to_string(buffer.output_grads.size()) +
                               " gradients for " + std::to_string(outputs.size()) +
                               " outputs that need one");
    }
    torch::autograd::backward(outputs, buffer.output_grads);
  }
  buffer.outputs.clear();
  buffer.output_grads.clear();
  buffer.loss = at::Tensor();
  --live_;
}

void PipelineEngine::send_activation(PipeBuffer& buffer) {
  send_to_stage(buffer.outputs, grid_->stage_id() + 1, kActivationTag);
}

void PipelineEngine::recv_activation(PipeBuffer& buffer) {
  buffer.inputs = recv_from_stage(grid_->stage_id() - 1, kActivationTag, buffer.inputs);
}

void PipelineEngine::send_grad(PipeBuffer& buffer) {
  Activation grads;
  for (const auto& input : buffer.inputs) {
    if (!input.requires_grad()) continue;
    grads.push_back(input.grad().defined() ? input.grad() : at::zeros_like(input));
  }
  send_to_stage(grads, grid_->stage_id() - 1, kGradTag);
}

void PipelineEngine::recv_grad(PipeBuffer& buffer) {
  buffer.output_grads = recv_from_stage(grid_->stage_id() + 1, kGradTag, buffer.output_grads);
}

bool PipelineEngine::partitioned_transfers() const {
  return config_.pipeline.partitioned_transfers && grid_->model_parallel_size() > 1;
}

// Sends complete before the stage computes on, as DeepSpeed's blocking transfers do (the
// schedules pair each send with a receive the peer posts in the same step): MPI moves a
// large message only while both sides poll, so a send left pending during the next
// forward or backward would hold the receiving stage up for that long.
void PipelineEngine::send_to_stage(const Activation& tensors, int stage, int tag) {
  if (!partitioned_transfers()) {
    bytes_moved_ = byte_size(tensors);
    transport_->send(faulty(tensors), stage, tag).wait();
    return;
  }
  const comm::PartitionedTensors partitioned =
      comm::partition(faulty(tensors), grid_->model_parallel_id(), grid_->model_parallel_size());
  bytes_moved_ = byte_size(partitioned.shares);
  Activation wire{partitioned.layout};
  wire.insert(wire.end(), partitioned.shares.begin(), partitioned.shares.end());
  transport_->send(wire, stage, tag).wait();
}

Activation PipelineEngine::recv_from_stage(int stage, int tag, const Activation& reuse) {
  if (!partitioned_transfers()) {
    Activation tensors = transport_->recv(stage, tag, reuse);
    bytes_moved_ = byte_size(tensors);
    return tensors;
  }
  Activation wire = transport_->recv(stage, tag);
  if (wire.empty()) throw std::runtime_error("a partitioned transfer arrived without its layout");
  const comm::PartitionedTensors partitioned{wire.front(), {wire.begin() + 1, wire.end()}};
  bytes_moved_ = byte_size(partitioned.shares);
  return comm::assemble(partitioned, *grid_->model_comm());
}

Activation PipelineEngine::faulty(const Activation& tensors) {
  const std::string fault = std::exchange(next_send_fault_, std::string());
  if (fault.empty()) return tensors;
  Activation broken;
  for (const auto& t : tensors) {
    if (fault == "reshape") broken.push_back(t.detach().flatten());
    if (fault == "retype") broken.push_back(is_floating(t) ? t.detach().to(at::kDouble) : t);
  }
  return broken;
}

void PipelineEngine::reduce_tied_grads() {
  for (const auto& [key, comm] : tied_comms_) {
    for (const auto& parameter : module_->tied_parameters(key)) {
      if (!parameter.grad().defined()) parameter.mutable_grad() = at::zeros_like(parameter);
      at::Tensor grad = parameter.mutable_grad();
      comm->all_reduce(grad, comm::ReduceOp::kSum);
    }
  }
}

void PipelineEngine::reduce_grads() {
  if (grid_->data_parallel_size() == 1) return;
  // Flat buckets of at most reduce_bucket_size elements, allocated once and reused.
  std::vector<at::Tensor> grads;
  for (const auto& p : module_->parameters()) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    grads.push_back(p.mutable_grad());
  }
  std::size_t bucket = 0;
  for (std::size_t first = 0; first < grads.size();) {
    int64_t elements = 0;
    std::size_t last = first;
    while (last < grads.size() &&
           (last == first || elements + grads[last].numel() <= config_.reduce_bucket_size)) {
      elements += grads[last++].numel();
    }
    if (bucket == reduce_buckets_.size() || reduce_buckets_[bucket].numel() != elements) {
      reduce_buckets_.resize(std::max(reduce_buckets_.size(), bucket + 1));
      const at::ScalarType wire =
          config_.precision.communication_data_type == "fp32" ? at::kFloat : dtype_;
      reduce_buckets_[bucket] = at::empty({elements}, grads[first].options().dtype(wire));
    }
    at::Tensor& flat = reduce_buckets_[bucket];
    int64_t offset = 0;
    for (std::size_t i = first; i < last; ++i) {
      flat.narrow(0, offset, grads[i].numel()).copy_(grads[i].reshape({-1}));
      offset += grads[i].numel();
    }
    grid_->data_comm()->all_reduce(flat, comm::ReduceOp::kAverage);
    offset = 0;
    for (std::size_t i = first; i < last; ++i) {
      grads[i].copy_(flat.narrow(0, offset, grads[i].numel()).view_as(grads[i]));
      offset += grads[i].numel();
    }
    first = last;
    ++bucket;
  }
}

double PipelineEngine::global_grad_norm() {
  // The norm over the whole model: each stage's and shard's part, tied and replicated
  // tensors counted once.
  at::Tensor squares = at::zeros({1}, at::kDouble);
  for (const auto& p : norm_parameters_) {
    if (p.grad().defined()) squares += p.grad().to(at::kDouble).pow(2).sum();
  }
  grid_->pipe_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  grid_->model_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  return std::sqrt(squares.item<double>());
}

bool PipelineEngine::gather_master_grads() {
  const double unscale = 1.0 / loss_scaler_.scale();
  bool finite = true;
  for (auto& [parameter, master] : masters_) {
    if (!parameter.grad().defined()) continue;
    if (!master.is_same(parameter)) master.mutable_grad() = parameter.grad().to(at::kFloat);
    if (unscale != 1.0) master.mutable_grad().mul_(unscale);
  }
  if (std::exchange(overflow_fault_, false) && !masters_.empty() &&
      masters_.front().second.grad().defined()) {
    masters_.front().second.mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
  }
  if (config_.precision.dtype != "fp16") return false;
  for (const auto& [parameter, master] : masters_) {
    if (master.grad().defined() && !master.grad().isfinite().all().item<bool>()) finite = false;
  }
  // Every stage and replica must take the same decision.
  at::Tensor overflow = at::tensor({finite ? int64_t{0} : int64_t{1}}, at::kLong);
  grid_->world_comm()->all_reduce(overflow, comm::ReduceOp::kMax);
  return overflow.item<int64_t>() != 0;
}

void PipelineEngine::optimizer_step() {
  const bool overflow = gather_master_grads();
  loss_scaler_.update(overflow);
  if (!overflow) {
    last_grad_norm_ = global_grad_norm();
    const double coefficient = config_.gradient_clipping / (last_grad_norm_ + 1e-6);
    if (config_.gradient_clipping > 0 && coefficient < 1.0) {
      for (const auto& [parameter, master] : masters_) {
        if (master.grad().defined()) master.mutable_grad().mul_(coefficient);
      }
    }
    last_learning_rate_ = lr_schedule_(global_steps_);
    set_learning_rate(*optimizer_, last_learning_rate_);
    optimizer_->step();
    copy_masters_to_model();
  }
  optimizer_->zero_grad();
  for (auto& [parameter, master] : masters_) parameter.mutable_grad() = at::Tensor();
  ++global_steps_;
}

double PipelineEngine::aggregate_loss() {
  // The last stage's mean over micro-batches, averaged over replicas, sent up the pipe.
  at::Tensor loss = at::zeros({1}, at::kDouble);
  if (grid_->is_last_stage()) {
    loss.fill_(total_loss_.item<double>() / micro_batches());
    grid_->data_comm()->all_reduce(loss, comm::ReduceOp::kAverage);
  }
  grid_->pipe_comm()->broadcast(loss, grid_->pipe_parallel_size() - 1);
  return loss.item<double>();
}

void PipelineEngine::report(double loss, double seconds) {
  std::vector<double> timings;
  if (config_.wall_clock_breakdown) {
    for (int k = 0; k < schedule::kNumOpKinds; ++k)
      timings.push_back(timers_.seconds(static_cast<OpKind>(k)));
    timers_.reset();
  }
  at::Tensor gathered;
  if (config_.wall_clock_breakdown) {
    gathered = grid_->pipe_comm()->all_gather(at::tensor(timings, at::kDouble));
  }
  if (grid_->global_rank() != 0) return;
  const double iteration = seconds / config_.steps_per_print;
  std::printf("steps: %lld loss: %.4f iter time (s): %.4f samples/sec: %.3f\n",
              static_cast<long long>(global_steps_), loss, iteration,
              config_.train_batch_size / iteration);
  if (!config_.wall_clock_breakdown) return;
  std::printf("  time per stage (ms):");
  for (int k = 0; k < schedule::kNumOpKinds; ++k) {
    if (gathered.select(1, k).sum().item<double>() == 0) continue;
    std::printf(" %s", std::string(schedule::name(static_cast<OpKind>(k))).c_str());
    for (int s = 0; s < gathered.size(0); ++s)
      std::printf(" %.1f", gathered[s][k].item<double>() * 1e3);
    std::printf(";");
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace pipetrain
