#include "data_parallel/sharded_reduction.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "data_parallel/flat_parameters.h"

namespace pipetrain::data_parallel {
namespace {

std::vector<int64_t> element_counts(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> counts;
  for (const auto& t : tensors) counts.push_back(t.numel());
  return counts;
}

// What start() returns for a bucket already reduced after each pass: nothing to wait for.
class NothingToReduce final : public comm::Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace

ShardedReduction::ShardedReduction(std::vector<at::Tensor> parameters,
                                   const std::vector<bool>& late, const std::vector<int>& layers,
                                   std::shared_ptr<comm::Communicator> group,
                                   const ZeroConfig& zero, at::ScalarType wire)
    : parameters_(std::move(parameters)),
      group_(std::move(group)),
      zero_(zero),
      wire_(wire),
      buckets_(zero.stage >= 2
                   ? layer_buckets(layers, late)
                   : backward_order_buckets(parameters_, late, zero.reduce_bucket_size)),
      layout_(element_counts(parameters_), buckets_, group_->size()),
      pieces_(buckets_.size()),
      complete_(buckets_.size(), false),
      per_pass_(zero.stage >= 2),
      accumulated_(buckets_.size()) {
  for (const auto& bucket : buckets_)
    late_bucket_.push_back(!bucket.empty() && late[bucket.front()]);
  if (zero_.stage >= 3) {
    sharded_ = std::make_shared<ShardedParameters>(parameters_, layers, layout_, group_);
    storage_ = sharded_;
  } else {
    storage_ =
        std::make_shared<FlatParameters>(parameters_, layout_, group_, zero_.allgather_bucket_size);
  }
}

comm::WorkPtr ShardedReduction::start(int k) {
  if (reduced_per_pass(k)) return std::make_unique<NothingToReduce>();
  return start_reduce(k);
}

comm::WorkPtr ShardedReduction::start_reduce(int k) {
  // The bucket's gradients (zeros where backward left none); the other parameters only
  // stand in for their sizes, as read() touches nothing outside the bucket.
  std::vector<at::Tensor> grads(parameters_.begin(), parameters_.end());
  for (std::size_t i : buckets_[k]) {
    const at::Tensor& p = parameters_[i];
    grads[i] = p.grad().defined() ? p.grad() : at::zeros_like(p);
  }
  // Allocated per bucket and step, not kept: in all, as large as the gradients themselves.
  at::Tensor bucket =
      at::empty({layout_.bucket_size(k)}, parameters_[buckets_[k].front()].options().dtype(wire_));
  layout_.read(grads, layout_.bucket_begin(k), bucket);
  pieces_[k] = at::empty({layout_.bucket_size(k) / layout_.shards()}, bucket.options());
  return group_->reduce_scatter_async(bucket, pieces_[k], comm::ReduceOp::kAverage);
}

void ShardedReduction::complete(int k) {
  // The piece's master gradient (the wire may be 16-bit); none when reduced per pass.
  if (!reduced_per_pass(k)) pieces_[k] = pieces_[k].to(at::kFloat);
  complete_[k] = true;
}

void ShardedReduction::abandon(int k) {
  pieces_[k] = at::Tensor();  // the work keeps what the collective may still write
  complete_[k] = false;
}

void ShardedReduction::begin_step() {
  // What a step that threw left: its pieces, reduced or not, and its passes' sums.
  std::fill(accumulated_.begin(), accumulated_.end(), at::Tensor());
  std::fill(pieces_.begin(), pieces_.end(), at::Tensor());
  std::fill(complete_.begin(), complete_.end(), false);
  if (per_pass_) {
    for (auto& parameter : parameters_) parameter.mutable_grad() = at::Tensor();
  }
}

void ShardedReduction::after_backward_pass() {
  if (!per_pass_) return;
  // Every bucket that holds gradients started, then each waited for in turn.
  std::vector<std::pair<int, comm::WorkPtr>> started;
  for (int k = 0; k < layout_.buckets(); ++k) {
    if (late_bucket_[k]) continue;
    // Every replica ran the same pass over the same graph: the same buckets hold gradients.
    const auto& members = buckets_[k];
    if (std::none_of(members.begin(), members.end(),
                     [&](std::size_t i) { return parameters_[i].grad().defined(); }))
      continue;
    started.emplace_back(k, start_reduce(k));
    // Copied into the bucket: the full gradients go before the collective runs.
    for (std::size_t i : members) parameters_[i].mutable_grad() = at::Tensor();
  }
  for (auto& [k, work] : started) {
    work->wait();
    const at::Tensor piece = std::exchange(pieces_[k], at::Tensor()).to(at::kFloat);
    accumulated_[k] = accumulated_[k].defined() ? accumulated_[k].add_(piece) : piece;
  }
}

void ShardedReduction::finish() {
  for (int k = 0; k < layout_.buckets(); ++k) {
    if (complete_[k]) continue;
    start(k)->wait();
    complete(k);
  }
}

at::Tensor ShardedReduction::take(int k) {
  complete_[k] = false;
  at::Tensor piece = std::exchange(pieces_[k], at::Tensor());
  if (at::Tensor passes = std::exchange(accumulated_[k], at::Tensor()); passes.defined())
    piece = piece.defined() ? piece.add_(passes) : passes;
  return piece;
}

}  // namespace pipetrain::data_parallel
