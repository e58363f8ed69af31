#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "pipetrain/engine/micro_batch_source.h"

namespace pipetrain::data {

// Samples as rows of tensors: inputs[i] and labels[i] are sample i.
class TensorDataset {
 public:
  TensorDataset(comm::TensorList inputs, comm::TensorList labels);
  int64_t size() const { return size_; }
  engine::MicroBatch get(const std::vector<int64_t>& indices) const;

 private:
  comm::TensorList inputs_;
  comm::TensorList labels_;
  int64_t size_ = 0;
};

// This replica's share of a dataset for one epoch, as torch's DistributedSampler: the
// indices (shuffled by seed + epoch if asked) padded by wrapping to a multiple of the
// replica count, then every `replicas`-th from `rank`.
std::vector<int64_t> distributed_indices(int64_t size, int replicas, int rank, bool shuffle,
                                         uint64_t seed, int64_t epoch);

// Micro-batches of `batch_size` samples over this replica's indices; incomplete last
// micro-batches are dropped. reset(epoch) starts another epoch.
class DataLoader : public engine::MicroBatchSource {
 public:
  DataLoader(std::shared_ptr<const TensorDataset> dataset, int64_t batch_size, int replicas,
             int rank, bool shuffle = false, uint64_t seed = 0);
  engine::MicroBatch next() override;
  // {"epoch", "samples"}: samples consumed this epoch over all replicas, so the position
  // carries over to another number of replicas.
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  void reset(int64_t epoch);
  int64_t epoch() const { return epoch_; }

 private:
  std::shared_ptr<const TensorDataset> dataset_;
  int64_t batch_size_;
  int replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
  std::size_t position_ = 0;
};

// Restarts its loader (next epoch) whenever it runs out, so training never stops for data.
class RepeatingLoader : public engine::MicroBatchSource {
 public:
  explicit RepeatingLoader(std::unique_ptr<DataLoader> loader) : loader_(std::move(loader)) {}
  engine::MicroBatch next() override;
  nlohmann::json state() const override { return loader_->state(); }
  void restore(const nlohmann::json& state) override { loader_->restore(state); }

 private:
  std::unique_ptr<DataLoader> loader_;
};

}  // namespace pipetrain::data
