#include "pipetrain/engine/sharded_masters.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "pipetrain/optim/optimizer_state.h"

namespace pipetrain::engine {
namespace {

std::vector<int64_t> element_counts(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> counts;
  for (const auto& t : tensors) counts.push_back(t.numel());
  return counts;
}

std::vector<int64_t> packed_strides(at::IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int i = static_cast<int>(sizes.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(sizes[i + 1], 1);
  return strides;
}

}  // namespace

ShardedMasters::ShardedMasters(const std::vector<at::Tensor>& parameters,
                               const std::vector<at::Tensor>& norm_parameters,
                               const std::vector<bool>& decayed,
                               std::shared_ptr<const topology::Grid> grid,
                               std::shared_ptr<comm::Communicator> data, const ZeroConfig& zero,
                               at::ScalarType wire)
    : grid_(std::move(grid)),
      data_(std::move(data)),
      zero_(zero),
      wire_(wire),
      parameters_(parameters),
      layout_(element_counts(parameters), data_->size()) {
  const at::TensorOptions options =
      parameters_.empty() ? at::TensorOptions(at::kFloat) : parameters_.front().options();
  flat_ = at::zeros({layout_.padded_size()}, options.requires_grad(false));
  seat_parameters();
  own_ = flat_.narrow(0, data_->rank() * layout_.shard_size(), layout_.shard_size());
  aliased_ = flat_.scalar_type() == at::kFloat;
  master_ = {(aliased_ ? own_.detach() : own_.to(at::kFloat)).requires_grad_(true)};
  build_norm_mask(norm_parameters);
  if (decayed.size() != parameters_.size())
    throw std::invalid_argument("one weight-decay flag per parameter");
  any_decayed_ = std::find(decayed.begin(), decayed.end(), true) != decayed.end();
  decay_mask_ = shard_mask(decayed);
  if (decay_mask_.defined()) decay_mask_ = decay_mask_.to(at::kBool);  // not converted per step
}

void ShardedMasters::seat_parameters() {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor& p = parameters_[i];
    if (p.options().dtype() != flat_.options().dtype() || p.device() != flat_.device())
      throw std::invalid_argument("ZeRO needs every parameter of a stage in one dtype and device");
    for (std::size_t j = 0; j < i; ++j) {
      if (parameters_[j].is_same(p)) throw std::invalid_argument("a parameter listed twice");
    }
    flat_.narrow(0, layout_.offset(i), p.numel()).copy_(p.reshape({-1}));
    p.set_(flat_.storage(), layout_.offset(i), p.sizes(), packed_strides(p.sizes()));
  }
}

void ShardedMasters::build_norm_mask(const std::vector<at::Tensor>& norm_parameters) {
  std::vector<bool> counted;
  for (const auto& p : parameters_) {
    counted.push_back(std::any_of(norm_parameters.begin(), norm_parameters.end(),
                                  [&](const at::Tensor& n) { return n.is_same(p); }));
  }
  norm_mask_ = shard_mask(counted);
}

at::Tensor ShardedMasters::shard_mask(const std::vector<bool>& chosen) const {
  if (std::find(chosen.begin(), chosen.end(), false) == chosen.end()) return {};
  at::Tensor whole = at::zeros({layout_.padded_size()}, own_.options().dtype(at::kFloat));
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (chosen[i]) whole.narrow(0, layout_.offset(i), parameters_[i].numel()).fill_(1);
  }
  return whole.narrow(0, data_->rank() * layout_.shard_size(), layout_.shard_size()).clone();
}

void ShardedMasters::apply_weight_decay(const optim::WeightDecay& decay, double lr) {
  if (any_decayed_ && master_.front().grad().defined())
    optim::apply_weight_decay(decay, master_.front(), lr, decay_mask_);
}

int64_t ShardedMasters::per_rank(int64_t bucket) const {
  return std::clamp<int64_t>(bucket / layout_.shards(), 1,
                             std::max<int64_t>(layout_.shard_size(), 1));
}

void ShardedMasters::take_gradients(double unscale) {
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters_)
    grads.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
  const int64_t shard = layout_.shard_size();
  const int64_t step = per_rank(zero_.reduce_bucket_size);
  at::Tensor grad = at::empty({shard}, own_.options().dtype(at::kFloat));
  // Allocated per step, not kept: at the default bucket size it is as large as the
  // gradients themselves.
  at::Tensor buffer = at::empty({step * layout_.shards()}, own_.options().dtype(wire_));
  // Round k reduces elements [k * step, (k + 1) * step) of every rank's shard at once.
  for (int64_t begin = 0; begin < shard; begin += step) {
    const int64_t n = std::min(step, shard - begin);
    at::Tensor bucket = buffer.narrow(0, 0, n * layout_.shards());
    for (int r = 0; r < layout_.shards(); ++r)
      layout_.read(grads, r * shard + begin, bucket.narrow(0, r * n, n));
    grad.narrow(0, begin, n).copy_(data_->reduce_scatter(bucket, comm::ReduceOp::kAverage));
  }
  if (unscale != 1.0) grad.mul_(unscale);
  master_.front().mutable_grad() = grad;
  if (zero_.stage >= 2) clear_model_gradients();
}

double ShardedMasters::global_grad_norm() const {
  // This rank's shard of every stage's and model rank's part, masked so that tied and
  // replicated tensors count once; summed in double over data, pipe and model ranks.
  const at::Tensor& grad = master_.front().grad();
  at::Tensor squares = at::zeros({1}, at::kDouble);
  if (grad.defined() && grad.numel() > 0) {
    const at::Tensor counted = norm_mask_.defined() ? grad * norm_mask_ : grad;
    squares += counted.to(at::kDouble).pow(2).sum().cpu();
  }
  grid_->data_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  grid_->pipe_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  grid_->model_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  return std::sqrt(squares.item<double>());
}

void ShardedMasters::copy_to_model() {
  at::NoGradGuard no_grad;
  if (!aliased_) own_.copy_(master_.front());
  const int64_t shard = layout_.shard_size();
  const int64_t step = per_rank(zero_.allgather_bucket_size);
  for (int64_t begin = 0; begin < shard; begin += step) {
    const int64_t n = std::min(step, shard - begin);
    const at::Tensor gathered = data_->all_gather(own_.narrow(0, begin, n));
    for (int r = 0; r < layout_.shards(); ++r) {
      if (r != data_->rank()) flat_.narrow(0, r * shard + begin, n).copy_(gathered[r]);
    }
  }
}

void ShardedMasters::clear_model_gradients() {
  for (auto& parameter : parameters_) parameter.mutable_grad() = at::Tensor();
}

int64_t ShardedMasters::master_bytes() const {
  return aliased_ ? 0 : static_cast<int64_t>(master_.front().nbytes());
}

std::vector<at::Tensor> ShardedMasters::per_parameter(const at::Tensor& flat) const {
  std::vector<at::Tensor> tensors;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    tensors.push_back(
        flat.narrow(0, layout_.offset(i), parameters_[i].numel()).view(parameters_[i].sizes()));
  }
  return tensors;
}

std::vector<ParameterState> ShardedMasters::whole_state(torch::optim::Optimizer& optimizer) const {
  // Between steps every replica's flat buffer is whole; an fp32 one is the masters.
  const at::Tensor masters = aliased_ ? flat_ : data_->all_gather(master_.front()).reshape({-1});
  std::vector<ParameterState> whole;
  for (const auto& master : per_parameter(masters)) whole.push_back({master, {}});
  // Per-element state (moments, momentum) is joined like the masters; scalars (Adam's
  // step count) are the same on every rank and copied to each parameter.
  for (const auto& [key, value] : optim::optimizer_state(optimizer, master_.front())) {
    if (!optim::is_per_element(key)) {
      for (auto& state : whole) state.optimizer_state.emplace_back(key, value);
      continue;
    }
    const auto parts = per_parameter(data_->all_gather(value).reshape({-1}));
    for (std::size_t i = 0; i < whole.size(); ++i)
      whole[i].optimizer_state.emplace_back(key, parts[i]);
  }
  return whole;
}

ParameterState ShardedMasters::gathered_state(torch::optim::Optimizer& optimizer,
                                              std::size_t position) const {
  const at::Tensor& parameter = parameters_.at(position);
  const int64_t begin = layout_.offset(position);
  auto whole = [&](const at::Tensor& shard) {
    const at::Tensor joined = gathered(shard, begin, parameter.numel());
    return joined.defined() ? joined.view(parameter.sizes()) : joined;
  };
  // Between steps every replica's flat buffer is whole; an fp32 one is the masters.
  ParameterState state{aliased_ ? flat_.narrow(0, begin, parameter.numel()).view(parameter.sizes())
                                : whole(master_.front()),
                       {}};
  for (const auto& [key, value] : optim::optimizer_state(optimizer, master_.front())) {
    if (!optim::is_per_element(key)) {  // a scalar such as Adam's step count, alike everywhere
      state.optimizer_state.emplace_back(key, value);
    } else if (const at::Tensor part = whole(value); part.defined()) {
      state.optimizer_state.emplace_back(key, part);
    }
  }
  return state;
}

at::Tensor ShardedMasters::gathered(const at::Tensor& shard, int64_t begin, int64_t count) const {
  constexpr int kTag = 41;  // p2p on the data-parallel group only ever carries these parts
  const int64_t size = layout_.shard_size(), end = begin + count;
  auto part_of = [&](int rank) {  // [first, last) of the flat elements rank `rank` holds
    const int64_t first = std::max(begin, rank * size);
    return std::pair{first, std::max(first, std::min(end, (rank + 1) * size))};
  };
  if (const int rank = data_->rank(); rank != 0) {
    const auto [first, last] = part_of(rank);
    if (last > first)
      data_->send(shard.narrow(0, first - rank * size, last - first).contiguous(), 0, kTag)->wait();
    return {};
  }
  const at::NoGradGuard no_grad;  // the shards are leaves the optimizer steps
  at::Tensor joined = at::empty({count}, shard.options());
  std::vector<comm::WorkPtr> parts;
  for (int rank = 0; rank < data_->size(); ++rank) {
    const auto [first, last] = part_of(rank);
    if (last <= first) continue;
    at::Tensor target = joined.narrow(0, first - begin, last - first);
    if (rank == 0) {
      target.copy_(shard.narrow(0, first, last - first));
    } else {
      parts.push_back(data_->recv(target, rank, kTag));
    }
  }
  for (auto& part : parts) part->wait();
  return joined;
}

void ShardedMasters::restore(const std::vector<ParameterState>& whole,
                             torch::optim::Optimizer& optimizer) {
  at::NoGradGuard no_grad;
  const int64_t begin = data_->rank() * layout_.shard_size();
  std::vector<at::Tensor> masters;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    masters.push_back(whole.at(i).master);
    parameters_[i].copy_(masters.back());
  }
  if (!aliased_) layout_.read(masters, begin, master_.front());
  // The keys of the first parameter with state; a parameter without (never stepped)
  // contributes zeros to per-element state.
  const auto first = std::find_if(whole.begin(), whole.end(), [](const ParameterState& s) {
    return !s.optimizer_state.empty();
  });
  comm::NamedTensors state;
  if (first != whole.end()) {
    for (const auto& [key, value] : first->optimizer_state) {
      if (!optim::is_per_element(key)) {
        state.emplace_back(key, value);
        continue;
      }
      std::vector<at::Tensor> values;
      for (std::size_t i = 0; i < parameters_.size(); ++i) {
        at::Tensor v;
        for (const auto& [k, t] : whole[i].optimizer_state) {
          if (k == key) v = t;
        }
        values.push_back(v.defined() ? v : at::zeros(parameters_[i].sizes(), at::kFloat));
      }
      at::Tensor shard = at::empty({layout_.shard_size()}, own_.options().dtype(at::kFloat));
      layout_.read(values, begin, shard);
      state.emplace_back(key, shard);
    }
  }
  optim::set_optimizer_state(optimizer, master_.front(), state);
}

}  // namespace pipetrain::engine
