#include "data_parallel/bucket_reduction.h"

#include <stdexcept>

namespace pipetrain::data_parallel {

std::vector<std::vector<std::size_t>> backward_order_buckets(
    const std::vector<at::Tensor>& parameters, const std::vector<bool>& late,
    int64_t bucket_elements) {
  std::vector<std::vector<std::size_t>> buckets;
  for (bool later : {false, true}) {
    int64_t elements = 0;
    bool opened = false;  // a bucket of this kind is open
    for (std::size_t i = parameters.size(); i-- > 0;) {
      if (late.at(i) != later) continue;
      const int64_t n = parameters[i].numel();
      if (!opened || (elements > 0 && elements + n > bucket_elements)) {
        buckets.emplace_back();
        elements = 0;
        opened = true;
      }
      buckets.back().push_back(i);
      elements += n;
    }
  }
  return buckets;
}

std::vector<std::vector<std::size_t>> layer_buckets(const std::vector<int>& layers,
                                                    const std::vector<bool>& late) {
  if (layers.size() != late.size())
    throw std::invalid_argument("layer buckets need each parameter's layer");
  std::vector<std::vector<std::size_t>> buckets;
  for (bool later : {false, true}) {
    bool opened = false;  // a bucket of this kind is open
    int open_layer = 0;
    for (std::size_t i = layers.size(); i-- > 0;) {
      if (late.at(i) != later) continue;
      if (!opened || layers.at(i) != open_layer) buckets.emplace_back();
      buckets.back().push_back(i);
      opened = true;
      open_layer = layers[i];
    }
  }
  return buckets;
}

}  // namespace pipetrain::data_parallel
