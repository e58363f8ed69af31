#include "data_parallel/flat_parameters.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace pipetrain::data_parallel {

FlatParameters::FlatParameters(std::vector<at::Tensor> parameters, const FlatShards& layout,
                               std::shared_ptr<comm::Communicator> data,
                               int64_t allgather_bucket_size)
    : layout_(layout), data_(std::move(data)), allgather_bucket_size_(allgather_bucket_size) {
  const at::TensorOptions options =
      parameters.empty() ? at::TensorOptions(at::kFloat) : parameters.front().options();
  flat_ = at::zeros({layout_.padded_size()}, options.requires_grad(false));
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    at::Tensor& p = parameters[i];
    if (p.options().dtype() != flat_.options().dtype() || p.device() != flat_.device())
      throw std::invalid_argument("ZeRO needs every parameter of a stage in one dtype and device");
    for (std::size_t j = 0; j < i; ++j) {
      if (parameters[j].is_same(p)) throw std::invalid_argument("a parameter listed twice");
    }
    flat_.narrow(0, layout_.offset(i), p.numel()).copy_(p.reshape({-1}));
    p.set_(flat_.storage(), layout_.offset(i), p.sizes(), packed_strides(p.sizes()));
  }
}

at::Tensor FlatParameters::piece(int k) const {
  const FlatShards::Piece piece = layout_.piece(data_->rank(), k);
  return flat_.narrow(0, piece.flat_begin, piece.size);
}

int64_t FlatParameters::per_round(int64_t piece) const {
  return std::clamp<int64_t>(allgather_bucket_size_ / layout_.shards(), 1,
                             std::max<int64_t>(piece, 1));
}

void FlatParameters::gather_parameters() {
  at::NoGradGuard no_grad;
  const int rank = data_->rank();
  for (int k = 0; k < layout_.buckets(); ++k) {
    const FlatShards::Piece own = layout_.piece(rank, k);
    const int64_t step = per_round(own.size);
    if (step >= own.size) {  // the bucket's pieces lie in rank order: gathered in place
      at::Tensor bucket = flat_.narrow(0, layout_.bucket_begin(k), layout_.bucket_size(k));
      data_->all_gather_in_place(bucket);
      continue;
    }
    for (int64_t begin = 0; begin < own.size; begin += step) {  // in rounds
      const int64_t n = std::min(step, own.size - begin);
      const at::Tensor gathered = data_->all_gather(flat_.narrow(0, own.flat_begin + begin, n));
      for (int r = 0; r < layout_.shards(); ++r) {
        if (r != rank)
          flat_.narrow(0, layout_.piece(r, k).flat_begin + begin, n).copy_(gathered[r]);
      }
    }
  }
}

}  // namespace pipetrain::data_parallel
