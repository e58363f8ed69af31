#pragma once

#include <cstdint>
#include <vector>

namespace pipetrain::data {

// The order of `count` items in `epoch`, shuffled from (seed, stream, epoch) alone.
std::vector<int64_t> epoch_order(uint64_t seed, uint64_t stream, int64_t epoch, int64_t count);

// `count` items read epoch after epoch, each epoch in its own shuffled order (epoch_order), as
// one global sequence of samples: what a source of examples, pairs or rollouts reads its
// sample `i` from, the same in every layout.
class ShuffledEpochs {
 public:
  ShuffledEpochs(uint64_t seed, uint64_t stream, int64_t count)
      : seed_(seed), stream_(stream), count_(count) {}

  // The item global sample `sample` reads (count > 0).
  int64_t item_of(int64_t sample);

 private:
  uint64_t seed_;
  uint64_t stream_;
  int64_t count_;
  int64_t epoch_ = -1;          // of order_
  std::vector<int64_t> order_;  // the items of epoch_, shuffled
};

}  // namespace pipetrain::data
