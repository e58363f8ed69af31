#include "data_parallel/averaged_buckets.h"

#include <ATen/ATen.h>

namespace pipetrain::data_parallel {

AveragedBuckets::AveragedBuckets(std::vector<at::Tensor> parameters,
                                 std::vector<std::vector<std::size_t>> buckets,
                                 std::shared_ptr<comm::Communicator> data, at::ScalarType wire)
    : parameters_(std::move(parameters)), buckets_(std::move(buckets)), data_(std::move(data)) {
  for (const auto& members : buckets_) {
    int64_t elements = 0;
    auto& offsets = offsets_.emplace_back();
    for (std::size_t i : members) {
      offsets.push_back(elements);
      elements += parameters_[i].numel();
    }
    const auto& first = parameters_.at(members.front());
    flats_.push_back(at::empty({elements}, first.options().dtype(wire).requires_grad(false)));
  }
}

comm::WorkPtr AveragedBuckets::start(int k) {
  at::Tensor& flat = flats_[k];
  for (std::size_t m = 0; m < buckets_[k].size(); ++m) {
    const at::Tensor& p = parameters_[buckets_[k][m]];
    at::Tensor part = flat.narrow(0, offsets_[k][m], p.numel());
    if (p.grad().defined()) {
      part.copy_(p.grad().reshape({-1}));
    } else {
      part.zero_();
    }
  }
  return data_->all_reduce_async(flat, comm::ReduceOp::kAverage);
}

void AveragedBuckets::complete(int k) {
  for (std::size_t m = 0; m < buckets_[k].size(); ++m) {
    at::Tensor& p = parameters_[buckets_[k][m]];
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    at::Tensor& grad = p.mutable_grad();
    grad.copy_(flats_[k].narrow(0, offsets_[k][m], p.numel()).view_as(grad));
  }
}

void AveragedBuckets::abandon(int k) {
  flats_[k] = at::empty_like(flats_[k]);
}

}  // namespace pipetrain::data_parallel
