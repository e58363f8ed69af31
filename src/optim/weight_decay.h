#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

namespace pipetrain::optim {

// Which parameters weight decay shrinks: the parameter groups of Megatron-style recipes,
// where biases, norms and embeddings keep their values under decay alone. Torch-free, so
// the config checks the patterns when it is read.
class WeightDecayRule {
 public:
  // `exempt` as in the key weight_decay_exempt: {"auto"}, or regexes searched in
  // "TYPE.NAME". InputError naming the key for a pattern that is not a regex or is longer
  // than 256 characters.
  explicit WeightDecayRule(const std::vector<std::string>& exempt);

  // Whether decay applies to a parameter of `dims` dimensions called `name` in its layer's
  // module, in a layer of type `type`; `model_exempt`: the model lists it in
  // LayerSpec::no_weight_decay (what "auto" exempts besides tensors below 2 dimensions).
  bool decays(const std::string& type, const std::string& name, int64_t dims,
              bool model_exempt) const;

 private:
  bool automatic_ = false;
  std::vector<std::regex> patterns_;
};

}  // namespace pipetrain::optim
