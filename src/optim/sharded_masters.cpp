#include "optim/sharded_masters.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "optim/optimizer_state.h"

namespace pipetrain::optim {

ShardedMasters::ShardedMasters(std::shared_ptr<data_parallel::ShardedReduction> reduction,
                               const std::vector<at::Tensor>& norm_parameters,
                               const std::vector<bool>& decayed,
                               std::shared_ptr<const topology::Grid> grid)
    : reduction_(std::move(reduction)),
      grid_(std::move(grid)),
      data_(reduction_->group()),
      storage_(reduction_->storage()),
      parameters_(reduction_->parameters()),
      layout_(reduction_->layout()),
      aliased_(parameters_.empty() || parameters_.front().scalar_type() == at::kFloat) {
  for (int k = 0; k < layout_.buckets(); ++k) {
    const at::Tensor own = storage_->piece(k);
    master_.push_back((aliased_ ? own.detach() : own.to(at::kFloat)).requires_grad_(true));
  }
  if (master_.empty())  // no parameters: one empty master, as the optimizer needs one
    master_.push_back(at::zeros({0}, at::kFloat).requires_grad_(true));
  build_norm_mask(norm_parameters);
  if (decayed.size() != parameters_.size())
    throw std::invalid_argument("one weight-decay flag per parameter");
  any_decayed_ = std::find(decayed.begin(), decayed.end(), true) != decayed.end();
  decay_mask_ = shard_mask(decayed);
  if (decay_mask_.defined()) decay_mask_ = decay_mask_.to(at::kBool);  // not converted per step
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
  at::Tensor whole = at::zeros({layout_.padded_size()}, master_.front().options());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (chosen[i]) whole.narrow(0, layout_.offset(i), parameters_[i].numel()).fill_(1);
  }
  return layout_.shard_of(whole, data_->rank()).clone();
}

void ShardedMasters::apply_weight_decay(const optim::WeightDecay& decay, double lr) {
  if (!any_decayed_ || !master_.front().grad().defined()) return;
  for (int k = 0; k < layout_.buckets(); ++k) {
    const at::Tensor mask = decay_mask_.defined() ? piece_of(decay_mask_, k) : at::Tensor();
    optim::apply_weight_decay(decay, master_[k], lr, mask);
  }
}

at::Tensor ShardedMasters::piece_of(const at::Tensor& shard, int k) const {
  const data_parallel::FlatShards::Piece piece = layout_.piece(data_->rank(), k);
  return shard.narrow(0, piece.shard_begin, piece.size);
}

void ShardedMasters::take_gradients(double unscale) {
  for (int k = 0; k < layout_.buckets(); ++k) {
    at::Tensor grad = reduction_->take(k);
    if (!grad.defined()) grad = at::zeros_like(master_[k]);  // no pass left a gradient
    if (unscale != 1.0) grad.mul_(unscale);
    master_[k].mutable_grad() = grad;
  }
  if (layout_.buckets() == 0) master_.front().mutable_grad() = at::zeros_like(master_.front());
  if (reduction_->zero().stage >= 2) clear_model_gradients();
}

at::Tensor ShardedMasters::squared_grad_norm() const {
  // This rank's shard of the stage's and model rank's part, masked so that tied and
  // replicated tensors count once; summed in double on the device, read once, then over
  // the data-parallel ranks.
  at::Tensor on_device = at::zeros({1}, master_.front().options().dtype(at::kDouble));
  for (int k = 0; k < layout_.buckets(); ++k) {
    const at::Tensor& grad = master_[k].grad();
    if (!grad.defined()) continue;
    const at::Tensor counted = norm_mask_.defined() ? grad * piece_of(norm_mask_, k) : grad;
    on_device += counted.to(at::kDouble).pow(2).sum();
  }
  at::Tensor squares = on_device.cpu();
  grid_->replica_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  return squares;
}

void ShardedMasters::copy_to_model() {
  at::NoGradGuard no_grad;
  for (int k = 0; k < layout_.buckets() && !aliased_; ++k) storage_->piece(k).copy_(master_[k]);
  storage_->gather_parameters();
}

void ShardedMasters::clear_model_gradients() {
  for (auto& parameter : parameters_) parameter.mutable_grad() = at::Tensor();
}

int64_t ShardedMasters::master_bytes() const {
  int64_t bytes = 0;
  for (const auto& master : master_) bytes += static_cast<int64_t>(master.nbytes());
  return aliased_ ? 0 : bytes;
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
  auto joined = [&](const std::vector<at::Tensor>& pieces) {
    return layout_.join(data_->all_gather(at::cat(pieces)));
  };
  // Between steps every replica holds every parameter whole below stage 3; in fp32 they are
  // the masters.
  std::vector<ParameterState> whole;
  if (parameters_are_masters()) {
    for (const auto& parameter : parameters_) whole.push_back({parameter.detach(), {}});
  } else {
    for (const auto& master : per_parameter(joined(master_))) whole.push_back({master, {}});
  }
  // Per-element state (moments, momentum) is joined like the masters; scalars (Adam's
  // step count) are the same on every rank and copied to each parameter.
  for (const auto& [key, pieces] : piece_state(optimizer)) {
    if (!optim::is_per_element(key)) {
      for (auto& state : whole) state.optimizer_state.emplace_back(key, pieces.front());
      continue;
    }
    const auto parts = per_parameter(joined(pieces));
    for (std::size_t i = 0; i < whole.size(); ++i)
      whole[i].optimizer_state.emplace_back(key, parts[i]);
  }
  return whole;
}

std::vector<std::pair<std::string, std::vector<at::Tensor>>> ShardedMasters::piece_state(
    torch::optim::Optimizer& optimizer) const {
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> state;
  for (const auto& master : master_) {
    const auto named = optim::optimizer_state(optimizer, master);
    if (state.empty()) {
      for (const auto& [key, value] : named) state.emplace_back(key, std::vector<at::Tensor>{});
    }
    for (std::size_t e = 0; e < named.size() && e < state.size(); ++e)
      state[e].second.push_back(named[e].second);
  }
  return state;
}

ParameterState ShardedMasters::gathered_state(torch::optim::Optimizer& optimizer,
                                              std::size_t position) const {
  const at::Tensor& parameter = parameters_.at(position);
  auto whole = [&](const std::vector<at::Tensor>& pieces) {
    const at::Tensor joined = gathered(pieces, position);
    return joined.defined() ? joined.view(parameter.sizes()) : joined;
  };
  ParameterState state{parameters_are_masters() ? parameter.detach() : whole(master_), {}};
  for (const auto& [key, pieces] : piece_state(optimizer)) {
    if (!optim::is_per_element(key)) {  // a scalar such as Adam's step count, alike everywhere
      state.optimizer_state.emplace_back(key, pieces.front());
    } else if (const at::Tensor part = whole(pieces); part.defined()) {
      state.optimizer_state.emplace_back(key, part);
    }
  }
  return state;
}

at::Tensor ShardedMasters::gathered(const std::vector<at::Tensor>& pieces,
                                    std::size_t position) const {
  constexpr int kTag = 41;  // p2p on the data-parallel group only ever carries these parts
  const int64_t begin = layout_.offset(position), count = parameters_[position].numel();
  const int k = layout_.bucket_of(position);
  struct Part {
    int64_t first = 0;  // flat elements [first, last) of the parameter that rank holds
    int64_t last = 0;
    int64_t in_piece = 0;  // where `first` lies in that rank's piece
  };
  auto part_of = [&](int rank) {
    const data_parallel::FlatShards::Piece piece = layout_.piece(rank, k);
    const int64_t first = std::max(begin, piece.flat_begin);
    const int64_t last = std::max(first, std::min(begin + count, piece.flat_begin + piece.size));
    return Part{first, last, first - piece.flat_begin};
  };
  if (const int rank = data_->rank(); rank != 0) {
    const Part part = part_of(rank);
    if (part.last > part.first) {
      data_->send(pieces[k].narrow(0, part.in_piece, part.last - part.first).contiguous(), 0, kTag)
          ->wait();
    }
    return {};
  }
  const at::NoGradGuard no_grad;  // the shards are leaves the optimizer steps
  at::Tensor joined = at::empty({count}, pieces[k].options());
  std::vector<comm::WorkPtr> parts;
  for (int rank = 0; rank < data_->size(); ++rank) {
    const Part part = part_of(rank);
    if (part.last <= part.first) continue;
    at::Tensor target = joined.narrow(0, part.first - begin, part.last - part.first);
    if (rank == 0) {
      target.copy_(pieces[k].narrow(0, part.in_piece, part.last - part.first));
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
  std::vector<at::Tensor> masters;
  for (std::size_t i = 0; i < parameters_.size(); ++i) masters.push_back(whole.at(i).master);
  // This rank's pieces into the masters; copy_to_model() then writes them into the storage
  // (an fp32 model's masters are its pieces) and every replica gathers them.
  at::Tensor shard = at::empty({layout_.shard_size()}, master_.front().options());
  layout_.read_shard(masters, data_->rank(), shard);
  for (int k = 0; k < layout_.buckets(); ++k) master_[k].detach().copy_(piece_of(shard, k));
  // The keys of the first parameter with state; a parameter without (never stepped)
  // contributes zeros to per-element state.
  const auto first = std::find_if(whole.begin(), whole.end(), [](const ParameterState& s) {
    return !s.optimizer_state.empty();
  });
  comm::NamedTensors state;  // this rank's shard of each entry
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
      at::Tensor values_shard = at::empty({layout_.shard_size()}, master_.front().options());
      layout_.read_shard(values, data_->rank(), values_shard);
      state.emplace_back(key, values_shard);
    }
  }
  for (int k = 0; k < layout_.buckets(); ++k) {
    comm::NamedTensors piece;
    for (const auto& [key, value] : state)
      piece.emplace_back(key, optim::is_per_element(key) ? piece_of(value, k).clone() : value);
    optim::set_optimizer_state(optimizer, master_[k], piece);
  }
}

}  // namespace pipetrain::optim
