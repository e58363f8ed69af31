#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>

#include "pipetrain/module/layer.h"

// Packed documents (`data.pack`): a window holds several documents, given as the document
// of each position (int64 [batch, seq], non-decreasing along a row). No position attends
// across a document boundary, and positions restart at each document's first token.
namespace pipetrain::models {

// Each token's position within its document: int64 [batch, seq].
at::Tensor document_positions(const at::Tensor& documents);

// Which keys each query sees: the causal mask within each document, bool [batch, 1, seq, seq].
at::Tensor document_mask(const at::Tensor& documents);

// A layer whose module computes forward(x, documents) (documents undefined when the input
// is not packed): it takes {x} or {x, documents} and passes the documents on.
template <typename ModuleHolder>
module::LayerSpec document_layer(std::string type, std::function<ModuleHolder()> make,
                                 std::function<int64_t()> count_parameters) {
  module::LayerSpec spec;
  spec.type = std::move(type);
  spec.count_parameters = std::move(count_parameters);
  spec.build = [make = std::move(make)] {
    auto module = make().ptr();
    return module::Layer{module, [module](const module::Activation& x) {
                           if (x.size() < 2)
                             return module::Activation{module->forward(x.at(0), {})};
                           return module::Activation{module->forward(x[0], x[1]), x[1]};
                         }};
  };
  return spec;
}

}  // namespace pipetrain::models
