#include "module/layer_seed.h"

namespace pipetrain::module {

uint64_t layer_seed(uint64_t base, int index) {
  // splitmix64 of the pair; kept below 2^63 for generators that take signed seeds.
  uint64_t z = base + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) >> 1;
}

}  // namespace pipetrain::module
