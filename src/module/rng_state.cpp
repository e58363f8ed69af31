#include "module/rng_state.h"

#include <ATen/ATen.h>

#include <mutex>

namespace pipetrain::module {

at::Tensor rng_state(const at::Device& device) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_rng_state(const at::Device& device, const at::Tensor& state) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace pipetrain::module
