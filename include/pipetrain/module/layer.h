#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/comm/tensor_list.h"

namespace pipetrain::module {

// What flows between layers and stages: one tensor or a tuple of tensors.
using Activation = comm::TensorList;
using LayerFunction = std::function<Activation(const Activation&)>;

// A built layer: the parameters live in `module` (null for a plain function such as a
// reshape); `forward` maps the previous layer's output to this layer's.
struct Layer {
  std::shared_ptr<torch::nn::Module> module;
  LayerFunction forward;
};

// One entry of a model described as an ordered list of layers. `build` runs only on the
// stage that owns the layer, under a seed derived from (base seed, layer index).
struct LayerSpec {
  std::string type;  // e.g. "TransformerBlock"; partitioning by type matches it
  std::function<Layer()> build;
  // Parameter count without building the layer (for partitioning); empty: build and count.
  std::function<int64_t()> count_parameters;

  // Tied layers: every spec with the same non-empty key shares one module per stage and
  // the named parameters across stages (kept equal by reducing their gradients).
  std::string tie_key;
  std::vector<std::string> tied_parameters;
  // How a later occurrence of a tied module computes (e.g. the LM head through the
  // embedding weight); empty: the module's own forward.
  std::function<Activation(torch::nn::Module&, const Activation&)> tied_forward;

  // Parameters (names in the module) that weight decay leaves alone by default beyond the
  // tensors below 2 dimensions, e.g. an embedding's tables (see WeightDecayRule).
  std::vector<std::string> no_weight_decay;

  // The model's decoder block this layer is (transformers' `layers.N`, what `lora.layers`
  // names); -1: not a block (embeddings, final norm, head).
  int64_t block = -1;

  bool tied() const { return !tie_key.empty(); }
};

// A layer whose module maps one tensor to one tensor.
template <typename ModuleHolder>
LayerSpec module_layer(std::string type, std::function<ModuleHolder()> make,
                       std::function<int64_t()> count_parameters = {}) {
  LayerSpec spec;
  spec.type = std::move(type);
  spec.count_parameters = std::move(count_parameters);
  spec.build = [make = std::move(make)] {
    ModuleHolder holder = make();
    auto module = holder.ptr();
    return Layer{module,
                 [module](const Activation& x) { return Activation{module->forward(x.at(0))}; }};
  };
  return spec;
}

// A layer without parameters.
inline LayerSpec function_layer(std::string type, LayerFunction forward) {
  LayerSpec spec;
  spec.type = std::move(type);
  spec.count_parameters = [] { return int64_t{0}; };
  spec.build = [forward = std::move(forward)] { return Layer{nullptr, forward}; };
  return spec;
}

}  // namespace pipetrain::module
