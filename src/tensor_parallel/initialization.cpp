#include "tensor_parallel/initialization.h"

#include <ATen/ATen.h>

#include <utility>

namespace pipetrain::tensor_parallel {
namespace {

thread_local bool skipping = false;

}  // namespace

SkippedInitialization::SkippedInitialization() : was_skipping_(std::exchange(skipping, true)) {}

SkippedInitialization::~SkippedInitialization() {
  skipping = was_skipping_;
}

void init_normal(const at::Tensor& weight, double std) {
  if (skipping) return;
  const at::NoGradGuard no_grad;
  weight.normal_(0.0, std);
}

}  // namespace pipetrain::tensor_parallel
