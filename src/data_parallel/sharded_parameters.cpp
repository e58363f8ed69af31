#include "data_parallel/sharded_parameters.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace pipetrain::data_parallel {
namespace {

// Gives `tensor`'s storage `bytes` bytes of fresh memory from its own allocator (0: none),
// keeping the storage object, which every tensor seated in it shares.
void resize_storage(const at::Tensor& tensor, std::size_t bytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

}  // namespace

ShardedParameters::ShardedParameters(const std::vector<at::Tensor>& parameters,
                                     const std::vector<int>& layers, const FlatShards& layout,
                                     std::shared_ptr<comm::Communicator> data)
    : data_(std::move(data)), buckets_(layout.buckets()) {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].options().dtype() != parameters.front().options().dtype() ||
        parameters[i].device() != parameters.front().device())
      throw std::invalid_argument("ZeRO needs every parameter of a stage in one dtype and device");
    const int k = layout.bucket_of(i);
    buckets_[k].members.push_back({parameters[i], layout.offset(i) - layout.bucket_begin(k)});
    auto& bucket_layers = buckets_[k].layers;
    if (std::find(bucket_layers.begin(), bucket_layers.end(), layers.at(i)) == bucket_layers.end())
      bucket_layers.push_back(layers[i]);
  }
  for (int k = 0; k < layout.buckets(); ++k) {
    Bucket& bucket = buckets_[k];
    const FlatShards::Piece own = layout.piece(data_->rank(), k);
    const at::TensorOptions options = bucket.members.front().parameter.options();
    bucket.piece = at::empty({own.size}, options.requires_grad(false));
    layout.read(parameters, own.flat_begin, bucket.piece);
    seat(bucket, options, layout.bucket_size(k));
  }
}

std::vector<int> ShardedParameters::buckets_of(int layer) const {
  std::vector<int> found;
  for (int k = 0; k < buckets(); ++k) {
    const auto& layers = buckets_[k].layers;
    if (std::find(layers.begin(), layers.end(), layer) != layers.end()) found.push_back(k);
  }
  return found;
}

void ShardedParameters::seat(Bucket& bucket, const at::TensorOptions& options, int64_t size) {
  const at::NoGradGuard no_grad;  // re-seating leaves is no operation for autograd
  bucket.whole = at::empty({size}, options.requires_grad(false));
  for (auto& [parameter, offset] : bucket.members) {
    at::Tensor seated = parameter;  // a handle on the same TensorImpl
    seated.set_(bucket.whole.storage(), offset, parameter.sizes(),
                packed_strides(parameter.sizes()));
  }
  resize_storage(bucket.whole, 0);
  bucket.state = State::kReleased;
}

void ShardedParameters::start(int k) {
  Bucket& bucket = buckets_.at(k);
  if (bucket.state != State::kReleased) return;
  resize_storage(bucket.whole, bucket.whole.numel() * bucket.whole.element_size());
  const int64_t size = bucket.piece.numel();
  bucket.whole.narrow(0, data_->rank() * size, size).copy_(bucket.piece);
  bucket.work = data_->all_gather_in_place_async(bucket.whole);
  bucket.state = State::kGathering;
  peak_ = std::max(peak_, ++gathered_);
}

void ShardedParameters::wait(int k) {
  Bucket& bucket = buckets_.at(k);
  if (bucket.state != State::kGathering) return;
  bucket.work->wait();
  bucket.work.reset();
  bucket.state = State::kGathered;
}

void ShardedParameters::release(int k) {
  Bucket& bucket = buckets_.at(k);
  if (bucket.state == State::kReleased) return;
  wait(k);
  free_whole(bucket);
}

void ShardedParameters::free_whole(Bucket& bucket) {
  resize_storage(bucket.whole, 0);
  bucket.state = State::kReleased;
  --gathered_;
}

void ShardedParameters::release_all() {
  for (int k = 0; k < buckets(); ++k) release(k);
}

void ShardedParameters::abandon() {
  for (Bucket& bucket : buckets_) {
    if (bucket.state == State::kGathering && !comm::settled(*bucket.work)) {
      // The collective may still write the old storage: keep it, seat the parameters anew.
      const at::Tensor old = bucket.whole;
      seat(bucket, old.options(), old.numel());
      abandoned_.push_back({std::move(bucket.work), old});
      --gathered_;
      continue;
    }
    bucket.work.reset();
    if (bucket.state != State::kReleased) free_whole(bucket);
  }
}

}  // namespace pipetrain::data_parallel
