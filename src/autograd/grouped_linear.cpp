#include "pipetrain/autograd/grouped_linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <stdexcept>

#include "pipetrain/autograd/weight_grad_store.h"
#include "pipetrain/autograd/weight_gradient.h"

namespace pipetrain::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Each group's rows times its weight, transposed or not (`weights[e]` is [out, in]).
at::Tensor per_group(const at::Tensor& x, const at::Tensor& weights,
                     const std::vector<int64_t>& counts, bool transposed) {
  std::vector<at::Tensor> outputs;
  int64_t first = 0;
  for (std::size_t e = 0; e < counts.size(); ++e) {
    const at::Tensor rows = x.narrow(0, first, counts[e]);
    const at::Tensor w = weights.select(0, static_cast<int64_t>(e));
    outputs.push_back(transposed ? at::matmul(rows, w) : at::linear(rows, w));
    first += counts[e];
  }
  return at::cat(outputs);
}

class SplittableGroupedLinear : public torch::autograd::Function<SplittableGroupedLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weights,
                            std::vector<int64_t> counts) {
    ctx->save_for_backward({x});
    // The parameter itself (not a saved copy), so a deferred gradient lands in its .grad.
    ctx->saved_data["weights"] = weights;
    ctx->saved_data["counts"] = counts;
    return per_group(x, weights, counts, /*transposed=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor weights = ctx->saved_data["weights"].toTensor();
    const std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const at::Tensor g = grads[0];
    at::Tensor input_grad, weight_grad;
    if (ctx->needs_input_grad(0)) input_grad = per_group(g, weights, counts, /*transposed=*/true);
    if (ctx->needs_input_grad(1)) {
      weight_grad = weight_gradient(
          [g, x, counts] {
            std::vector<at::Tensor> stacked;
            int64_t first = 0;
            for (const int64_t count : counts) {
              stacked.push_back(g.narrow(0, first, count).t().mm(x.narrow(0, first, count)));
              first += count;
            }
            return at::stack(stacked);
          },
          weights);
    }
    return {input_grad, weight_grad, at::Tensor()};
  }
};

}  // namespace

at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weights,
                          const std::vector<int64_t>& counts) {
  if (weights.dim() != 3 || static_cast<int64_t>(counts.size()) != weights.size(0))
    throw std::invalid_argument(
        "grouped_linear takes [groups, out, in] weights and one count each");
  if (!recording_splittable() || !at::GradMode::is_enabled())
    return per_group(x, weights, counts, /*transposed=*/false);
  return SplittableGroupedLinear::apply(x, weights, counts);
}

}  // namespace pipetrain::autograd
