#include "pipetrain/data_parallel/gradient_sync.h"

#include "pipetrain/data_parallel/averaged_buckets.h"
#include "pipetrain/data_parallel/zero_config.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace pipetrain::data_parallel {
namespace {

// The gradient of `parameter`, zeros if backward left none, so every rank reduces alike.
at::Tensor gradient_of(const at::Tensor& parameter) {
  if (!parameter.grad().defined()) parameter.mutable_grad() = at::zeros_like(parameter);
  return parameter.mutable_grad();
}

}  // namespace

GradientSync::GradientSync(const module::PipelineModule& module, const groups::Communicators& comms,
                           DataParallel data_parallel)
    : module_(module),
      grid_(comms.grid()),
      data_(comms.data()),
      tied_comms_(comms.tied()),
      overlap_(data_parallel.overlap),
      expert_sums_elsewhere_(
          experts_reduce_scattered(!data_parallel.averages, grid_->expert_data_comm()->size())) {
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
  // Experts split over ranks are reduced apart (reduce_experts); the rest in the buckets.
  const auto shards = module_.shard_layouts();
  const auto named = module_.named_parameters();  // in parameters()' order
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto it = shards.find(named[i].first);
    if (it != shards.end() && it->second.group == tensor_parallel::ShardGroup::kExperts) {
      experts_.push_back(named[i].second);
    } else {
      averaged_.push_back(named[i].second);
      averaged_late_.push_back(late_[i]);
    }
  }
  if (!data_parallel.averages || grid_->replica_count() == 1) return;
  reduce_with(std::make_shared<AveragedBuckets>(
      averaged_, backward_order_buckets(averaged_, averaged_late_, data_parallel.bucket_elements),
      data_, data_parallel.wire));
}

void GradientSync::reduce_with(std::shared_ptr<BucketReduction> reduction) {
  if (grid_->replica_count() == 1) return;
  buckets_ = std::make_unique<GradientBuckets>(averaged_, averaged_late_, std::move(reduction),
                                               data_, grid_->replica_comm(), overlap_);
}

void GradientSync::reduce_experts() {
  // A rank's experts took tokens from every replica of its expert-parallel group, so their
  // gradients sum that group's replicas: summed over the ranks holding the same experts
  // and divided by every replica, they are the average over the replicas. Left to the
  // optimizer, the sum is its average over those ranks: the rest of the division is here.
  const auto& holders = grid_->expert_data_comm();
  const bool summed_here = !expert_sums_elsewhere_ && holders->size() > 1;
  const int divisor =
      expert_sums_elsewhere_ ? grid_->replica_count() / holders->size() : grid_->replica_count();
  for (const auto& parameter : experts_) {
    at::Tensor grad = gradient_of(parameter);
    grad.div_(divisor);
    if (summed_here) holders->all_reduce(grad, comm::ReduceOp::kSum);
  }
}

void GradientSync::choose_norm_parameters(const std::vector<at::Tensor>& counted_elsewhere) {
  // Tensor parallelism: shards count on every rank of the group, replicated tensors
  // (LayerNorms, row-parallel biases, positions) on its first rank only.
  const auto shards = module_.shard_layouts();
  const bool counts_replicated = grid_->model_parallel_id() == 0;
  for (const auto& [name, p] : module_.named_parameters()) {
    const bool elsewhere = std::any_of(counted_elsewhere.begin(), counted_elsewhere.end(),
                                       [&](const at::Tensor& e) { return e.is_same(p); });
    // Experts split over the expert group are replicated over the model group.
    const auto it = shards.find(name);
    const bool split =
        it != shards.end() && it->second.group == tensor_parallel::ShardGroup::kModel;
    if (!elsewhere && (counts_replicated || split)) norm_parameters_.push_back(p);
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
  reduce_experts();
}

}  // namespace pipetrain::data_parallel
