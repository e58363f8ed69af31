#include <utility>

#include "engine/engine_state.h"

// PipelineEngine's interface: each method forwards to what the engine holds (Impl,
// engine_state.h), so that none of it is part of the public header.
namespace pipetrain::engine {

PipelineEngine::PipelineEngine(std::shared_ptr<module::PipelineModule> module,
                               std::shared_ptr<topology::Grid> grid, TrainingConfig config)
    : PipelineEngine(std::move(module),
                     std::make_shared<groups::Communicators>(std::move(grid), config.device,
                                                             comm::Seconds(config.comm_timeout)),
                     config) {}

PipelineEngine::PipelineEngine(std::shared_ptr<module::PipelineModule> module,
                               std::shared_ptr<groups::Communicators> comms, TrainingConfig config)
    : impl_(std::make_unique<Impl>(std::move(module), std::move(comms), std::move(config))) {}

PipelineEngine::~PipelineEngine() = default;

void PipelineEngine::set_hooks(Hooks hooks) {
  impl_->set_hooks(std::move(hooks));
}

double PipelineEngine::train_batch(MicroBatchSource* data) {
  return impl_->train_batch(data);
}

PipelineEngine::EvalResult PipelineEngine::eval_batch(MicroBatchSource* data, bool return_outputs) {
  return impl_->eval_batch(data, return_outputs);
}

module::Activation PipelineEngine::infer(const module::Activation& inputs) {
  return impl_->infer(inputs);
}

std::vector<module::Activation> PipelineEngine::infer_each(
    const std::vector<module::Activation>& inputs, const std::function<void(int)>& before_forward) {
  return impl_->infer_streamed(
      static_cast<int>(inputs.size()),
      {.input = [&inputs](int k) { return inputs.at(k); }, .before_forward = before_forward});
}

std::vector<module::Activation> PipelineEngine::infer_streamed(int count,
                                                               const StreamHooks& hooks) {
  return impl_->infer_streamed(count, hooks);
}

comm::PendingSend PipelineEngine::feed_back(const comm::TensorList& tensors) {
  return impl_->feed_back(tensors);
}

comm::TensorList PipelineEngine::fed_back() {
  return impl_->fed_back();
}

void PipelineEngine::record_next_batch() {
  impl_->record_next_ = true;
}

std::vector<InstructionRecord> PipelineEngine::take_records() {
  return std::exchange(impl_->records_, {});
}

void PipelineEngine::set_progress_report(bool on) {
  impl_->report_progress_ = on;
}

double PipelineEngine::last_grad_norm() const {
  return impl_->optimizer_->last_grad_norm();
}

void PipelineEngine::set_grad_norm_reporting(bool on) {
  impl_->optimizer_->set_grad_norm_wanted(on);
}

double PipelineEngine::last_learning_rate() const {
  return impl_->optimizer_->last_learning_rate();
}

const at::Tensor& PipelineEngine::master_of(const at::Tensor& parameter) const {
  return impl_->optimizer_->master_of(parameter);
}

const optim::LossScaler& PipelineEngine::loss_scaler() const {
  return impl_->optimizer_->loss_scaler();
}

optim::LossScaler& PipelineEngine::loss_scaler() {
  return impl_->optimizer_->loss_scaler();
}

const std::vector<bool>& PipelineEngine::weight_decayed() const {
  return impl_->optimizer_->decayed();
}

std::vector<optim::ParameterState> PipelineEngine::whole_optimizer_state() {
  return impl_->optimizer_->whole_state();
}

optim::ParameterState PipelineEngine::gathered_optimizer_state(std::size_t position) {
  return impl_->optimizer_->gathered_state(position);
}

void PipelineEngine::restore_optimizer_state(const std::vector<optim::ParameterState>& whole) {
  impl_->optimizer_->restore(whole);
}

const data_parallel::LayerGathering* PipelineEngine::layer_gathering() const {
  return impl_->gathering_.get();
}

int64_t PipelineEngine::optimizer_state_bytes() {
  return impl_->optimizer_->state_bytes();
}

bool PipelineEngine::shards_optimizer() const {
  return impl_->optimizer_->sharded();
}

double PipelineEngine::loss_scale() const {
  return impl_->optimizer_->loss_scale();
}

int64_t PipelineEngine::skipped_steps() const {
  return loss_scaler().skipped_steps();
}

int64_t PipelineEngine::p2p_bytes() const {
  return impl_->link_->bytes();
}

at::Device PipelineEngine::device() const {
  return impl_->device_;
}

const groups::Communicators& PipelineEngine::communicators() const {
  return *impl_->comms_;
}

std::string PipelineEngine::pipe_transports() const {
  return impl_->comms_->pipe_transports();
}

comm::Transport PipelineEngine::data_transport() const {
  return impl_->comms_->data_transport();
}

const data_parallel::GradientBuckets* PipelineEngine::gradient_buckets() const {
  return impl_->gradients_->buckets();
}

module::PipelineModule& PipelineEngine::module() {
  return *impl_->module_;
}

const module::PipelineModule& PipelineEngine::module() const {
  return *impl_->module_;
}

torch::optim::Optimizer& PipelineEngine::optimizer() {
  return impl_->optimizer_->optimizer();
}

const TrainingConfig& PipelineEngine::config() const {
  return impl_->config_;
}

const topology::Grid& PipelineEngine::grid() const {
  return *impl_->grid_;
}

int PipelineEngine::output_stage() const {
  return impl_->output_stage();
}

bool PipelineEngine::holds_output() const {
  return impl_->holds_output();
}

int PipelineEngine::micro_batches() const {
  return impl_->micro_batches();
}

int64_t PipelineEngine::global_steps() const {
  return impl_->global_steps_;
}

void PipelineEngine::restore_global_steps(int64_t steps) {
  impl_->global_steps_ = steps;
}

schedule::PipelinePlan PipelineEngine::training_plan() const {
  return impl_->plan_of(impl_->config_.pipeline.schedule.kind, impl_->micro_batches());
}

int PipelineEngine::peak_live_activations() const {
  return impl_->peak_live_;
}

int64_t PipelineEngine::instructions_executed() const {
  return impl_->instructions_executed_;
}

const InstructionTimers& PipelineEngine::timers() const {
  return impl_->timers_;
}

}  // namespace pipetrain::engine
