#pragma once

#include "pipetrain/module/layer.h"

namespace pipetrain::module {

// Runs `function` on `inputs` without keeping its intermediate activations: only the
// inputs are saved, and backward runs `function` again (with the CPU and CUDA random
// states of the first run, so dropout masks match) to compute gradients. Parameters that
// `function` uses must be listed in `parameters`; they receive their gradients as
// without checkpointing.
Activation checkpointed(const LayerFunction& function, const Activation& inputs,
                        const std::vector<at::Tensor>& parameters);

// Whether a checkpointed function is running again for its backward now (on this thread),
// so that what its first run recorded is not recorded twice.
bool recomputing();

}  // namespace pipetrain::module
