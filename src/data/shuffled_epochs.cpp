#include "data/shuffled_epochs.h"

#include <ATen/ATen.h>

#include "module/layer_seed.h"

namespace pipetrain::data {

std::vector<int64_t> epoch_order(uint64_t seed, uint64_t stream, int64_t epoch, int64_t count) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(module::layer_seed(
      module::layer_seed(seed, static_cast<int>(stream)), static_cast<int>(epoch)));
  const at::Tensor order = at::randperm(count, generator, at::kLong);
  return {order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + count};
}

int64_t ShuffledEpochs::item_of(int64_t sample) {
  const int64_t epoch = sample / count_;
  if (epoch != epoch_) {
    order_ = epoch_order(seed_, stream_, epoch, count_);
    epoch_ = epoch;
  }
  return order_[static_cast<std::size_t>(sample % count_)];
}

}  // namespace pipetrain::data
