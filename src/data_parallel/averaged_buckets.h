#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data_parallel/bucket_reduction.h"
#include "pipetrain/comm/communicator.h"

namespace pipetrain::data_parallel {

// Data-parallel averaging without ZeRO: each bucket's gradients are copied into one flat
// tensor in the wire dtype, all-reduced to their average and copied back into each
// parameter's .grad() (made where backward left none, so every replica reduces alike).
class AveragedBuckets final : public BucketReduction {
 public:
  AveragedBuckets(std::vector<at::Tensor> parameters, std::vector<std::vector<std::size_t>> buckets,
                  std::shared_ptr<comm::Communicator> data, at::ScalarType wire);

  const std::vector<std::vector<std::size_t>>& buckets() const override { return buckets_; }
  comm::WorkPtr start(int k) override;
  void complete(int k) override;
  void abandon(int k) override;

 private:
  std::vector<at::Tensor> parameters_;
  std::vector<std::vector<std::size_t>> buckets_;
  std::shared_ptr<comm::Communicator> data_;
  std::vector<std::vector<int64_t>> offsets_;  // per bucket, of each member in its flat
  std::vector<at::Tensor> flats_;              // per bucket, allocated once
};

}  // namespace pipetrain::data_parallel
