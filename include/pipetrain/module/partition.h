#pragma once

#include <string>
#include <vector>

namespace pipetrain {

// Stage boundaries: stage s owns layers [parts[s], parts[s+1]); parts has stages + 1
// entries, from 0 to the layer count.
using Partition = std::vector<int>;

// Equal layer counts; the first (layers % stages) stages take one more.
Partition partition_uniform(int layers, int stages);

// Contiguous, non-empty stages minimising the heaviest stage's total weight (exact, by
// dynamic programming); among optimal splits, the one that cuts latest. Throws InputError
// if there are more stages than layers.
Partition partition_balanced(const std::vector<double>& weights, int stages);

// The partitioning methods by name:
//   uniform            equal layer counts
//   parameters         balance parameter counts (DeepSpeed's default)
//   type:REGEX         balance the number of layers whose type matches REGEX (ignoring case)
//   boundaries:A,B,... explicit cuts: stage 0 owns [0, A), stage 1 [A, B), ...
//   profile            balance measured forward+backward time
// `parameters`, `types` and `profile_costs` describe the layers; profile_costs may be empty
// unless the method is `profile`. Throws InputError naming the problem (unknown method,
// bad regex, more stages than layers, an empty stage, bad boundaries).
struct LayerFacts {
  std::vector<int64_t> parameters;
  std::vector<std::string> types;
  std::vector<double> profile_costs;
};
Partition partition_layers(const std::string& method, const LayerFacts& layers, int stages);

// Whether `method` needs measured costs (so the caller profiles only then).
bool partition_needs_profile(const std::string& method);

}  // namespace pipetrain
