#pragma once

#include <cstdint>

namespace pipetrain::module {

// Seed of layer `index` under `base`: a mix of both (splitmix64), so neighbouring layers
// differ and a layer's seed does not depend on how the model is split. Also used to derive
// other independent streams from one base seed (data order, dropout per replica).
uint64_t layer_seed(uint64_t base, int index);

}  // namespace pipetrain::module
