#include "autograd/released_outputs.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>

namespace pipetrain::autograd {

bool release_values(at::Tensor& output) {
  // Held elsewhere too (a node of this stage saved it as its input, or a layer returned it
  // twice), its values may be read again: a saved input keeps the tensor itself, not a copy.
  if (!output.defined() || !output.grad_fn() || output.is_view() || output.use_count() > 1)
    return false;
  output.set_data(at::empty({0}, output.options()));
  return true;
}

void backward_from(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grads) {
  torch::autograd::edge_list roots;
  roots.reserve(outputs.size());
  for (const auto& output : outputs) roots.push_back(torch::autograd::impl::gradient_edge(output));
  torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                        /*create_graph=*/false,
                                                        /*accumulate_grad=*/true);
}

}  // namespace pipetrain::autograd
