#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/io/errors.h"

// transformers' format of a model family: the fields of its config.json, read with their
// types checked, and its tensors' names (what a family's row gives import and export).
namespace pipetrain::models {

// One tensor of a model: transformers' name, pipetrain's ("layers.<index>.<name in the
// layer>", as `pipetrain export` writes them), whether transformers stores it transposed
// (GPT-2's Conv1D weights are [in, out]) and, for an expert's weight, which slice along
// the first dimension of pipetrain's tensor of every expert's it is (Mixtral stores each
// expert's w1, w2 and w3 apart).
struct HfTensor {
  std::string hf_name;
  std::string name;
  bool transposed = false;
  int64_t expert = -1;  // -1: the whole tensor
};

// Adds the tensor transformers names `hf` as pipetrain's `name` of layer `layer`.
inline void add_tensor(std::vector<HfTensor>& tensors, const std::string& hf, int layer,
                       const std::string& name, bool transposed = false) {
  tensors.push_back({hf, "layers." + std::to_string(layer) + "." + name, transposed});
}

// A config.json field, checked for its type; `fallback` when it is absent or null.
class HfFields {
 public:
  HfFields(const nlohmann::json& hf, std::string source) : hf_(hf), source_(std::move(source)) {
    if (!hf_.is_object()) throw io::InputError(source_ + ": not a JSON object");
  }

  int64_t integer(const std::string& key) const {
    const nlohmann::json& v = required(key);
    if (!v.is_number_integer()) refuse(key, "must be an integer");
    return v.get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    return present(key) ? integer(key) : fallback;
  }
  double number(const std::string& key, double fallback) const {
    if (!present(key)) return fallback;
    if (!hf_[key].is_number()) refuse(key, "must be a number");
    return hf_[key].get<double>();
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!present(key)) return fallback;
    if (!hf_[key].is_boolean()) refuse(key, "must be true or false");
    return hf_[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!present(key)) return fallback;
    if (!hf_[key].is_string()) refuse(key, "must be a string");
    return hf_[key].get<std::string>();
  }
  bool present(const std::string& key) const { return hf_.contains(key) && !hf_[key].is_null(); }
  const nlohmann::json& get(const std::string& key) const {
    if (!hf_[key].is_object()) refuse(key, "must be an object");
    return hf_[key];
  }
  const std::string& source() const { return source_; }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw io::InputError(source_ + ": " + key + " " + why);
  }

 private:
  const nlohmann::json& required(const std::string& key) const {
    if (!present(key)) refuse(key, "is missing");
    return hf_[key];
  }
  const nlohmann::json& hf_;
  std::string source_;
};

}  // namespace pipetrain::models
