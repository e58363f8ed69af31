#include "pipetrain/engine/gradient_sync.h"

#include "pipetrain/engine/averaged_buckets.h"

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

GradientSync::GradientSync(const module::PipelineModule& module, const Communicators& comms,
                           DataParallel data_parallel)
    : module_(module),
      grid_(comms.grid()),
      data_(comms.data()),
      tied_comms_(comms.tied()),
      overlap_(data_parallel.overlap) {
  // A tied tensor counts in the norm on its first owner stage only.
  std::vector<at::Tensor> counted_elsewhere;
  for (const auto& [key, comm] : tied_comms_) {
    if (module_.tie_owner_stages(key).front() == grid_->stage_id()) continue;
    for (const auto& p : module_.tied_parameters(key)) counted_elsewhere.push_back(p);
  }
  choose_norm_parameters(counted_elsewhere);
  const auto parameters = module_.parameters();
  late_.assign(parameters.size(), false);
  for (const auto& [key, comm] : tied_comms_) {
    for (const auto& tied : module_.tied_parameters(key)) {
      for (std::size_t i = 0; i < parameters.size(); ++i)
        late_[i] = late_[i] || parameters[i].is_same(tied);
    }
  }
  if (!data_parallel.averages || grid_->replica_count() == 1) return;
  reduce_with(std::make_shared<AveragedBuckets>(
      parameters, backward_order_buckets(parameters, late_, data_parallel.bucket_elements), data_,
      data_parallel.wire));
}

void GradientSync::reduce_with(std::shared_ptr<BucketReduction> reduction) {
  if (grid_->replica_count() == 1) return;
  buckets_ = std::make_unique<GradientBuckets>(module_.parameters(), late_, std::move(reduction),
                                               data_, grid_->replica_comm(), overlap_);
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
