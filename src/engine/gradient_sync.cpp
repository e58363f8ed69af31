#include "pipetrain/engine/gradient_sync.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace pipetrain::engine {
namespace {

// The gradient of `parameter`, zeros if backward left none, so every rank reduces alike.
at::Tensor gradient_of(const at::Tensor& parameter) {
  if (!parameter.grad().defined()) parameter.mutable_grad() = at::zeros_like(parameter);
  return parameter.mutable_grad();
}

}  // namespace

GradientSync::GradientSync(const module::PipelineModule& module,
                           std::shared_ptr<const topology::Grid> grid, DataParallel data_parallel)
    : module_(module), grid_(std::move(grid)), data_(std::move(data_parallel.data)) {
  connect_tied_layers();
  if (grid_->data_parallel_size() == 1 || !data_parallel.averages) return;
  const auto parameters = module_.parameters();
  std::vector<bool> late(parameters.size(), false);
  for (const auto& [key, comm] : tied_comms_) {
    for (const auto& tied : module_.tied_parameters(key)) {
      for (std::size_t i = 0; i < parameters.size(); ++i)
        late[i] = late[i] || parameters[i].is_same(tied);
    }
  }
  buckets_ = std::make_unique<GradientBuckets>(parameters, late, data_, grid_->data_comm(),
                                               data_parallel.bucket_elements, data_parallel.wire,
                                               data_parallel.overlap);
}

void GradientSync::connect_tied_layers() {
  // One communicator per key among the owner stages that share this rank's data and model
  // coordinates. Splitting is collective, so every rank takes part for every key.
  std::vector<at::Tensor> counted_elsewhere;
  std::map<std::string, bool> seen;
  for (const auto& spec : module_.specs()) {
    if (!spec.tied() || seen[spec.tie_key]) continue;
    seen[spec.tie_key] = true;
    const auto owners = module_.tie_owner_stages(spec.tie_key);
    if (owners.size() < 2) continue;
    const bool owner = std::find(owners.begin(), owners.end(), grid_->stage_id()) != owners.end();
    const int group =
        1 + grid_->data_parallel_id() * grid_->model_parallel_size() + grid_->model_parallel_id();
    auto comm = grid_->world_comm()->split(owner ? group : 0, grid_->global_rank());
    if (!owner) continue;
    comm->set_timeout(grid_->pipe_comm()->timeout());
    tied_comms_[spec.tie_key] = comm;
    if (owners.front() != grid_->stage_id()) {
      for (const auto& p : module_.tied_parameters(spec.tie_key)) counted_elsewhere.push_back(p);
    }
  }
  choose_norm_parameters(counted_elsewhere);
}

void GradientSync::choose_norm_parameters(const std::vector<at::Tensor>& counted_elsewhere) {
  // Tensor parallelism: shards count on every rank of the group, replicated tensors
  // (LayerNorms, row-parallel biases, positions) on its first rank only.
  const auto shards = module_.shard_layouts();
  const bool counts_replicated = grid_->model_parallel_id() == 0;
  for (const auto& [name, p] : module_.named_parameters()) {
    const bool elsewhere = std::any_of(counted_elsewhere.begin(), counted_elsewhere.end(),
                                       [&](const at::Tensor& e) { return e.is_same(p); });
    if (!elsewhere && (counts_replicated || shards.count(name))) norm_parameters_.push_back(p);
  }
}

void GradientSync::reduce_tied() {
  for (const auto& [key, comm] : tied_comms_) {
    for (const auto& parameter : module_.tied_parameters(key)) {
      at::Tensor grad = gradient_of(parameter);
      comm->all_reduce(grad, comm::ReduceOp::kSum);
    }
  }
}

void GradientSync::begin_step() {
  if (buckets_) buckets_->abandon();
}

void GradientSync::begin_last_backwards() {
  if (buckets_) buckets_->open();
}

void GradientSync::after_backward() {
  if (buckets_) buckets_->start_ready();
}

void GradientSync::reduce_data_parallel() {
  if (buckets_) buckets_->finish();
}

}  // namespace pipetrain::engine
