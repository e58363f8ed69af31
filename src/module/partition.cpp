#include "pipetrain/module/partition.h"

#include <algorithm>
#include <limits>
#include <regex>
#include <sstream>
#include <string>

#include "pipetrain/io/errors.h"

namespace pipetrain::module {
namespace {

void check_counts(int layers, int stages) {
  if (stages < 1) throw io::InputError("stages must be at least 1, got " + std::to_string(stages));
  if (layers < stages) {
    throw io::InputError("cannot split " + std::to_string(layers) + " layers over " +
                         std::to_string(stages) + " stages: every stage needs at least one layer");
  }
}

Partition parse_boundaries(const std::string& list, int layers, int stages) {
  Partition parts{0};
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      std::size_t used = 0;
      parts.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw io::InputError("partition boundaries: '" + item + "' is not a layer index");
    }
  }
  parts.push_back(layers);
  if (static_cast<int>(parts.size()) != stages + 1) {
    throw io::InputError("partition boundaries: " + std::to_string(parts.size() - 2) +
                         " cuts give " + std::to_string(parts.size() - 1) + " stages, need " +
                         std::to_string(stages));
  }
  for (int s = 0; s < stages; ++s) {
    if (parts[s] >= parts[s + 1]) {
      throw io::InputError("partition boundaries: stage " + std::to_string(s) +
                           " would own layers [" + std::to_string(parts[s]) + ", " +
                           std::to_string(parts[s + 1]) + "), which is empty");
    }
  }
  return parts;
}

}  // namespace

Partition partition_uniform(int layers, int stages) {
  check_counts(layers, stages);
  Partition parts(stages + 1, 0);
  const int base = layers / stages;
  const int extra = layers % stages;
  for (int s = 0; s < stages; ++s) parts[s + 1] = parts[s] + base + (s < extra ? 1 : 0);
  return parts;
}

Partition partition_balanced(const std::vector<double>& weights, int stages) {
  const int n = static_cast<int>(weights.size());
  check_counts(n, stages);
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  // best[k][i]: least possible heaviest stage when the first i layers form k stages.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInfinity));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0.0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n - (stages - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double heaviest = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (heaviest <= best[k][i]) {  // "<=": prefer the latest cut among equals
          best[k][i] = heaviest;
          cut[k][i] = j;
        }
      }
    }
  }
  Partition parts(stages + 1, 0);
  parts[stages] = n;
  for (int k = stages; k > 0; --k) parts[k - 1] = cut[k][parts[k]];
  return parts;
}

namespace {

// Balances the number of layers whose type matches the method's pattern.
Partition partition_by_type(const PartitionMethod& method, const std::vector<std::string>& types,
                            int stages) {
  // std::regex compiles and matches recursively: bound what it is given.
  constexpr std::size_t kMaxPatternLength = 256;
  if (method.argument.size() > kMaxPatternLength) {
    throw io::InputError("partition method 'type:...': the regular expression is longer than " +
                         std::to_string(kMaxPatternLength) + " characters");
  }
  int depth = 0;
  for (const char c : method.argument) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (depth > 8) {
      throw io::InputError(
          "partition method 'type:...': the regular expression nests groups deeper than 8");
    }
  }
  std::regex pattern;
  try {
    pattern = std::regex(method.argument, std::regex::icase);
  } catch (const std::regex_error& e) {
    throw io::InputError("partition method '" + method.name() +
                         "': bad regular expression: " + e.what());
  }
  std::vector<double> weights(types.size());
  for (std::size_t i = 0; i < types.size(); ++i)
    weights[i] = std::regex_search(types[i], pattern) ? 1.0 : 0.0;
  return partition_balanced(weights, stages);
}

}  // namespace

Partition partition_layers(const PartitionMethod& method, const LayerFacts& layers, int stages) {
  using Kind = PartitionMethod::Kind;
  const int n = static_cast<int>(layers.types.size());
  switch (method.kind) {
    case Kind::kUniform:
      return partition_uniform(n, stages);
    case Kind::kParameters:
      return partition_balanced({layers.parameters.begin(), layers.parameters.end()}, stages);
    case Kind::kProfile:
      if (static_cast<int>(layers.profile_costs.size()) != n) {
        throw std::logic_error("profile partitioning without a cost per layer");
      }
      return partition_balanced(layers.profile_costs, stages);
    case Kind::kType:
      return partition_by_type(method, layers.types, stages);
    case Kind::kBoundaries:
      check_counts(n, stages);
      return parse_boundaries(method.argument, n, stages);
  }
  throw std::logic_error("a partition method without a rule");
}

}  // namespace pipetrain::module
