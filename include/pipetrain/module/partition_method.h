#pragma once

#include <string>

namespace pipetrain::module {

// How layers are split over stages, parsed once from its name:
//   parameters         balance parameter counts (the default)
//   uniform            balance layer counts
//   type:REGEX         balance the layers whose type matches REGEX (case-insensitive)
//   boundaries:A,B,... the first layer of every stage after the first, given by hand
//   profile            balance measured forward + backward time
struct PartitionMethod {
  enum class Kind { kParameters, kUniform, kType, kBoundaries, kProfile };

  PartitionMethod() = default;
  // From a name as above; InputError for an unknown one. Implicit, so options read
  // naturally: {.partition_method = "uniform"}.
  PartitionMethod(const std::string& name);  // NOLINT(google-explicit-constructor)
  PartitionMethod(const char* name) : PartitionMethod(std::string(name)) {}  // NOLINT

  std::string name() const;
  bool operator==(const PartitionMethod&) const = default;

  Kind kind = Kind::kParameters;
  std::string argument;  // type: its REGEX; boundaries: its list
};

}  // namespace pipetrain::module
