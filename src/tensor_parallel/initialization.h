#pragma once

#include <ATen/core/Tensor.h>

namespace pipetrain::tensor_parallel {

// While one lives on this thread, layers built here leave their random weights
// uninitialised (as transformers' no_init_weights does): for callers that overwrite every
// weight next, such as `pipetrain import`, and pay neither the drawing nor the generator.
class SkippedInitialization {
 public:
  SkippedInitialization();
  ~SkippedInitialization();
  SkippedInitialization(const SkippedInitialization&) = delete;
  SkippedInitialization& operator=(const SkippedInitialization&) = delete;

 private:
  bool was_skipping_;
};

// Fills `weight` in place from N(0, std) with the default generator, or leaves it as it is
// under SkippedInitialization.
void init_normal(const at::Tensor& weight, double std);

}  // namespace pipetrain::tensor_parallel
