#pragma once

#include <string>
#include <vector>

#include "pipetrain/module/partition_method.h"

namespace pipetrain::module {

// Stage boundaries: stage s owns layers [parts[s], parts[s+1]); parts has stages + 1
// entries, from 0 to the layer count.
using Partition = std::vector<int>;

// Equal layer counts; the first (layers % stages) stages take one more.
Partition partition_uniform(int layers, int stages);

// Contiguous, non-empty stages minimising the heaviest stage's total weight (exact, by
// dynamic programming); among optimal splits, the one that cuts latest. Throws InputError
// if there are more stages than layers.
Partition partition_balanced(const std::vector<double>& weights, int stages);

// Splits layers as `method` says (see PartitionMethod; boundaries:A,B,... means stage 0
// owns [0, A), stage 1 [A, B), ...). `parameters`, `types` and `profile_costs` describe the layers;
// profile_costs may be empty unless the method is `profile`. Throws InputError naming the problem
// (bad regex, more stages than layers, an empty stage, bad boundaries).
struct LayerFacts {
  std::vector<int64_t> parameters;
  std::vector<std::string> types;
  std::vector<double> profile_costs;
};
Partition partition_layers(const PartitionMethod& method, const LayerFacts& layers, int stages);

// Whether `method` needs measured costs (so the caller profiles only then).
inline bool partition_needs_profile(const PartitionMethod& method) {
  return method.kind == PartitionMethod::Kind::kProfile;
}
// Whether `method` needs the layers' parameter counts (so they must be built to count).
inline bool partition_needs_parameters(const PartitionMethod& method) {
  return method.kind == PartitionMethod::Kind::kParameters || partition_needs_profile(method);
}

}  // namespace pipetrain::module
