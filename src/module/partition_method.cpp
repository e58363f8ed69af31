#include "pipetrain/module/partition_method.h"

#include <array>
#include <string_view>
#include <utility>

#include "pipetrain/io/errors.h"

namespace pipetrain::module {
namespace {

using Kind = PartitionMethod::Kind;

// Names, and for the kinds that take an argument the prefix before it.
constexpr std::array<std::pair<std::string_view, Kind>, 5> kNames{{
    {"parameters", Kind::kParameters},
    {"uniform", Kind::kUniform},
    {"type:", Kind::kType},
    {"boundaries:", Kind::kBoundaries},
    {"profile", Kind::kProfile},
}};

}  // namespace

PartitionMethod::PartitionMethod(const std::string& name) {
  for (const auto& [prefix, value] : kNames) {
    const bool takes_argument = prefix.back() == ':';
    if (takes_argument ? name.rfind(prefix, 0) == 0 : name == prefix) {
      kind = value;
      argument = takes_argument ? name.substr(prefix.size()) : "";
      return;
    }
  }
  throw io::InputError("unknown partition method '" + name +
                       "' (known: uniform, parameters, type:REGEX, boundaries:A,B,..., profile)");
}

std::string PartitionMethod::name() const {
  for (const auto& [prefix, value] : kNames) {
    if (value == kind) return std::string(prefix) + argument;
  }
  return "?";
}

}  // namespace pipetrain::module
