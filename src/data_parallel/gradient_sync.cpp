#include "data_parallel/gradient_sync.h"

#include "data_parallel/averaged_buckets.h"
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
  // Experts split over ranks are reduced apart (reduce_experts); the rest in the buckets.
  const auto shards = module_.shard_layouts();
  const auto named = module_.named_parameters();  // in parameters()' order
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto it = shards.find(named[i].first);
    const bool expert =
        it != shards.end() && it->second.group == tensor_parallel::ShardGroup::kExperts;
    Part& part = expert ? experts_ : averaged_;
    part.parameters.push_back(named[i].second);
    part.late.push_back(late_[i]);
    part.layers.push_back(std::stoi(named[i].first.substr(0, named[i].first.find('.'))));
  }
  // ZeRO (stages 1 to 3) shards the optimizer: the gradients are reduce-scattered onto the
  // pieces its masters own, and the parameters' storage is laid out with them. The
  // optimizer learns of it from sharded().
  if (data_parallel.zero.stage > 0) {
    shard(data_parallel);
  } else if (grid_->replica_count() > 1) {
    reduce_with(std::make_shared<AveragedBuckets>(
        averaged_.parameters,
        backward_order_buckets(averaged_.parameters, averaged_.late, data_parallel.bucket_elements),
        data_, data_parallel.wire));
  }
}

void GradientSync::shard(const DataParallel& data_parallel) {
  sharded_.dense =
      std::make_shared<ShardedReduction>(averaged_.parameters, averaged_.late, averaged_.layers,
                                         data_, data_parallel.zero, data_parallel.wire);
  reduce_with(sharded_.dense);
  const auto& holders = grid_->expert_data_comm();
  if (experts_.parameters.empty() || !experts_reduce_scattered(/*sharded=*/true, holders->size()))
    return;
  // ZeRO 1 over the ranks holding the same experts, whatever the stage: the experts'
  // weights stay whole, their masters and optimizer state are sharded.
  ZeroConfig experts_zero = data_parallel.zero;
  experts_zero.stage = 1;
  sharded_.experts =
      std::make_shared<ShardedReduction>(experts_.parameters, experts_.late, experts_.layers,
                                         holders, experts_zero, data_parallel.wire);
}

void GradientSync::reduce_with(std::shared_ptr<BucketReduction> reduction) {
  if (grid_->replica_count() == 1) return;
  buckets_ =
      std::make_unique<GradientBuckets>(averaged_.parameters, averaged_.late, std::move(reduction),
                                        data_, grid_->replica_comm(), overlap_);
}

void GradientSync::reduce_experts() {
  // A rank's experts took tokens from every replica of its expert-parallel group, so their
  // gradients sum that group's replicas: summed over the ranks holding the same experts
  // and divided by every replica, they are the average over the replicas. Reduce-scattered
  // onto shards (ZeRO), the reduction averages over those ranks: the rest of the division
  // is here.
  const auto& holders = grid_->expert_data_comm();
  const bool scattered = sharded_.experts != nullptr;
  const bool summed_here = !scattered && holders->size() > 1;
  const int divisor = scattered ? grid_->replica_count() / holders->size() : grid_->replica_count();
  for (const auto& parameter : experts_.parameters) {
    at::Tensor grad = gradient_of(parameter);
    grad.div_(divisor);
    if (summed_here) holders->all_reduce(grad, comm::ReduceOp::kSum);
  }
}

void GradientSync::choose_norm_parameters(const std::vector<at::Tensor>& counted_elsewhere) {
  // Tensor parallelism: shards count on every rank of the group, replicated tensors
  // (LayerNorms, row-parallel biases, positions) on its first rank only.
  const auto shards = module_.shard_layouts();
  const bool counts_replicated = grid_->tensor_parallel_id() == 0;
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

std::vector<ShardedReduction*> GradientSync::sharded_reductions() const {
  std::vector<ShardedReduction*> found;
  for (const auto& reduction : {sharded_.dense, sharded_.experts})
    if (reduction) found.push_back(reduction.get());
  return found;
}

void GradientSync::begin_step() {
  if (buckets_) buckets_->abandon();
  for (ShardedReduction* reduction : sharded_reductions()) reduction->begin_step();
}

void GradientSync::begin_last_backwards() {
  if (buckets_) buckets_->open();
}

void GradientSync::after_backward() {
  for (ShardedReduction* reduction : sharded_reductions()) reduction->after_backward_pass();
  if (buckets_) buckets_->start_ready();
}

void GradientSync::reduce_data_parallel() {
  if (buckets_) buckets_->finish();
  reduce_experts();
  // The buckets GradientBuckets did not reduce.
  for (ShardedReduction* reduction : sharded_reductions()) reduction->finish();
}

}  // namespace pipetrain::data_parallel
