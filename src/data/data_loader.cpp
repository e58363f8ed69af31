#include <ATen/ATen.h>

#include <numeric>
#include <random>

#include "pipetrain/data/data_source.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {

TensorDataset::TensorDataset(comm::TensorList inputs, comm::TensorList labels)
    : inputs_(std::move(inputs)), labels_(std::move(labels)) {
  const comm::TensorList* parts[] = {&inputs_, &labels_};
  size_ = inputs_.empty() ? 0 : inputs_.front().size(0);
  for (const comm::TensorList* part : parts) {
    for (const auto& t : *part) {
      if (t.dim() == 0 || t.size(0) != size_)
        throw std::invalid_argument("dataset tensors must share their first dimension");
    }
  }
}

engine::MicroBatch TensorDataset::get(const std::vector<int64_t>& indices) const {
  const at::Tensor rows = at::tensor(indices, at::kLong);
  engine::MicroBatch batch;
  for (const auto& t : inputs_) batch.inputs.push_back(t.index_select(0, rows));
  for (const auto& t : labels_) batch.labels.push_back(t.index_select(0, rows));
  return batch;
}

std::vector<int64_t> distributed_indices(int64_t size, int replicas, int rank, bool shuffle,
                                         uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + epoch));
  const int64_t padded = (size + replicas - 1) / replicas * replicas;
  for (int64_t i = size; i < padded && size > 0; ++i) order.push_back(order[i - size]);
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < static_cast<int64_t>(order.size()); i += replicas)
    mine.push_back(order[i]);
  return mine;
}

DataLoader::DataLoader(std::shared_ptr<const TensorDataset> dataset, int64_t batch_size,
                       int replicas, int rank, bool shuffle, uint64_t seed)
    : dataset_(std::move(dataset)),
      batch_size_(batch_size),
      replicas_(replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed) {
  if (batch_size_ < 1) throw std::invalid_argument("batch size must be at least 1");
  reset(0);
}

void DataLoader::reset(int64_t epoch) {
  epoch_ = epoch;
  indices_ = distributed_indices(dataset_->size(), replicas_, rank_, shuffle_, seed_, epoch);
  position_ = 0;
}

engine::MicroBatch DataLoader::next() {
  if (position_ + batch_size_ > indices_.size()) throw engine::DataExhausted();
  const std::vector<int64_t> chosen(indices_.begin() + position_,
                                    indices_.begin() + position_ + batch_size_);
  position_ += batch_size_;
  return dataset_->get(chosen);
}

nlohmann::json DataLoader::state() const {
  return {{"epoch", epoch_}, {"samples", static_cast<int64_t>(position_) * replicas_}};
}

void DataLoader::restore(const nlohmann::json& state) {
  int64_t epoch = 0, samples = 0;
  try {
    epoch = state.at("epoch").get<int64_t>();
    samples = state.at("samples").get<int64_t>();
  } catch (const std::exception&) {
    throw io::InputError("checkpoint data position must hold integers epoch and samples, got " +
                         state.dump());
  }
  if (samples < 0 || samples % replicas_ != 0) {
    throw io::InputError("checkpoint data position: " + std::to_string(samples) +
                         " samples do not split over " + std::to_string(replicas_) + " replicas");
  }
  reset(epoch);
  position_ = static_cast<std::size_t>(samples / replicas_);
}

engine::MicroBatch RepeatingLoader::next() {
  try {
    return loader_->next();
  } catch (const engine::DataExhausted&) {
    loader_->reset(loader_->epoch() + 1);
    return loader_->next();  // a dataset smaller than one micro-batch still runs out
  }
}

}  // namespace pipetrain::data
