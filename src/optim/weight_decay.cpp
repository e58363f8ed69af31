#include "optim/weight_decay.h"

#include "pipetrain/io/errors.h"

namespace pipetrain::optim {
namespace {

constexpr std::size_t kLongestPattern = 256;  // std::regex recurses per character

}  // namespace

WeightDecayRule::WeightDecayRule(const std::vector<std::string>& exempt) {
  if (exempt.size() == 1 && exempt.front() == "auto") {
    automatic_ = true;
    return;
  }
  for (const auto& pattern : exempt) {
    if (pattern.size() > kLongestPattern) {
      throw io::InputError("weight_decay_exempt: a pattern of " + std::to_string(pattern.size()) +
                           " characters, at most " + std::to_string(kLongestPattern));
    }
    try {
      patterns_.emplace_back(pattern);
    } catch (const std::regex_error& e) {
      throw io::InputError("weight_decay_exempt: '" + pattern + "' is not a regex (" + e.what() +
                           ")");
    }
  }
}

bool WeightDecayRule::decays(const std::string& type, const std::string& name, int64_t dims,
                             bool model_exempt) const {
  if (automatic_) return dims >= 2 && !model_exempt;
  const std::string full = type + "." + name;
  for (const auto& pattern : patterns_) {
    if (std::regex_search(full, pattern)) return false;
  }
  return true;
}

}  // namespace pipetrain::optim
