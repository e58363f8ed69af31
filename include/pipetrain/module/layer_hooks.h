#pragma once

#include <memory>

#include "pipetrain/module/layer.h"

namespace pipetrain::module {

// Called around each layer's forward by PipelineModule (also when activation checkpointing
// runs a layer again in backward): what a layer needs that the model does not hold, such
// as ZeRO stage 3's parameters, gathered just in time.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  // Layer `layer`'s forward is about to run.
  virtual void before_forward(int layer) = 0;
  // It ran and returned `output`; what the next layer gets instead (the same values, e.g.
  // with an autograd node of the hooks' own in front of the layer's backward).
  virtual Activation after_forward(int layer, Activation output) = 0;
};

}  // namespace pipetrain::module
