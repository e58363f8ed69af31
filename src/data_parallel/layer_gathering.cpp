#include "data_parallel/layer_gathering.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace pipetrain::data_parallel {

LayerGathering::LayerGathering(std::shared_ptr<ShardedParameters> parameters,
                               std::vector<std::pair<int, int>> chunks,
                               std::map<int, std::vector<int>> buckets_of, Options options)
    : parameters_(std::move(parameters)),
      chunks_(std::move(chunks)),
      buckets_of_(std::move(buckets_of)),
      options_(options) {
  if (options_.prefetch < 0) throw std::invalid_argument("prefetch must be at least 0");
}

const std::vector<int>& LayerGathering::buckets(int layer) const {
  static const std::vector<int> none;
  const auto found = buckets_of_.find(layer);
  return found == buckets_of_.end() ? none : found->second;
}

std::vector<int> LayerGathering::neighbours(int layer, int step, int count) const {
  const auto chunk = std::find_if(chunks_.begin(), chunks_.end(), [&](const auto& range) {
    return range.first <= layer && layer < range.second;
  });
  std::vector<int> found;
  if (chunk == chunks_.end()) return found;
  for (int i = layer + step; chunk->first <= i && i < chunk->second; i += step) {
    if (static_cast<int>(found.size()) >= count) break;
    if (!buckets(i).empty()) found.push_back(i);
  }
  return found;
}

std::set<int> LayerGathering::buckets_of(const std::vector<int>& layers) const {
  std::set<int> found;
  for (int layer : layers) found.insert(buckets(layer).begin(), buckets(layer).end());
  return found;
}

void LayerGathering::want(int layer, int step) {
  const std::vector<int> ahead = neighbours(layer, step, options_.prefetch);
  if (options_.reshard_after_forward) {
    std::vector<int> layers = ahead;
    layers.push_back(layer);
    const std::set<int> wanted = buckets_of(layers);
    for (int k = 0; k < parameters_->buckets(); ++k) {
      if (!wanted.count(k)) parameters_->release(k);
    }
  }
  for (int k : buckets(layer)) parameters_->start(k);
  for (int other : ahead) {
    for (int k : buckets(other)) parameters_->start(k);
  }
  for (int k : buckets(layer)) parameters_->wait(k);
}

void LayerGathering::before_forward(int layer) {
  want(layer, 1);
}

module::Activation LayerGathering::after_forward(int layer, module::Activation output) {
  if (options_.reshard_after_forward) {
    // Released unless the next layers share a bucket with it (a module used twice).
    const std::set<int> ahead = buckets_of(neighbours(layer, 1, options_.prefetch));
    for (int k : buckets(layer)) {
      if (!ahead.count(k)) parameters_->release(k);
    }
  }
  if (buckets(layer).empty() || !at::GradMode::is_enabled()) return output;
  // The first of the outputs' gradients to arrive gathers the layer again (the others find
  // it gathered): their hooks run before the nodes that made them, the layer's own.
  const std::weak_ptr<LayerGathering> self = weak_from_this();
  for (at::Tensor& tensor : output) {
    if (!tensor.requires_grad()) continue;
    tensor.register_hook([self, layer](const at::Tensor& grad) {
      if (const auto gathering = self.lock()) gathering->before_backward(layer);
      return grad;
    });
  }
  return output;
}

void LayerGathering::before_backward(int layer) {
  want(layer, -1);
}

void LayerGathering::end_pass() {
  if (options_.reshard_after_forward) parameters_->release_all();
}

void LayerGathering::end_step() {
  parameters_->release_all();
}

void LayerGathering::abandon() {
  parameters_->abandon();
}

}  // namespace pipetrain::data_parallel
