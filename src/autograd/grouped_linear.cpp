#include "autograd/grouped_linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "autograd/weight_gradient.h"

namespace pipetrain::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Whether ATen's grouped GEMM takes these operands (the rows and the weights or the
// gradient), with rows of `in` and `out` elements in groups of `counts` rows: its kernels
// need rows of a multiple of 16 bytes. On the CPU in any floating type. On a GPU (this path
// has not run on one) in bfloat16 only, with every operand 16-byte aligned and every group
// a multiple of 16 rows (the offsets its CUDA kernels are known to need; no padding is
// added yet), and not after a GPU refused it once (before Hopper), said in one line.
std::atomic<bool> gpu_refused{false};

bool grouped_mm_takes(std::initializer_list<at::Tensor> operands, int64_t in, int64_t out,
                      const std::vector<int64_t>& counts) {
  const at::Tensor& x = *operands.begin();
  const int64_t bytes = static_cast<int64_t>(x.element_size());
  if ((in * bytes) % 16 != 0 || (out * bytes) % 16 != 0) return false;
  if (x.is_cpu()) return at::isFloatingType(x.scalar_type());
  if (!x.is_cuda() || x.scalar_type() != at::kBFloat16 || gpu_refused) return false;
  for (const at::Tensor& operand : operands) {
    if (reinterpret_cast<std::uintptr_t>(operand.data_ptr()) % 16 != 0) return false;
  }
  return std::all_of(counts.begin(), counts.end(), [](int64_t n) { return n % 16 == 0; });
}

// Where each group's rows end (int32, on x's device), as the grouped GEMM takes them.
at::Tensor group_ends(const std::vector<int64_t>& counts, const at::Tensor& x) {
  return at::tensor(counts, at::kLong).cumsum(0).to(x.device(), at::kInt);
}

// `grouped` (one grouped GEMM) where ATen takes it (see grouped_mm_takes), else `loop`.
template <typename Grouped, typename Loop>
at::Tensor grouped_or_loop(std::initializer_list<at::Tensor> operands, int64_t in, int64_t out,
                           const std::vector<int64_t>& counts, const Grouped& grouped,
                           const Loop& loop) {
  if (grouped_mm_takes(operands, in, out, counts)) {
    try {
      return grouped();
    } catch (const c10::Error& e) {
      if (operands.begin()->is_cpu()) throw;
      if (!gpu_refused.exchange(true)) {
        const std::string why = e.what_without_backtrace();
        std::fprintf(stderr,
                     "pipetrain: the experts run as a loop of products: this GPU refuses ATen's "
                     "grouped GEMM (%s)\n",
                     why.substr(0, why.find('\n')).c_str());
      }
    }
  }
  return loop();
}

// Each group's rows times its weight, transposed or not (`weights[e]` is [out, in]): the
// forward (x [n, in] to [n, out]) or the rows' gradient (g [n, out] to [n, in]).
at::Tensor per_group(const at::Tensor& x, const at::Tensor& weights,
                     const std::vector<int64_t>& counts, bool transposed) {
  return grouped_or_loop(
      {x, weights}, weights.size(2), weights.size(1), counts,
      [&] {
        const at::Tensor w = transposed ? weights : weights.transpose(1, 2);
        return at::_grouped_mm(x, w, group_ends(counts, x));
      },
      [&] {
        std::vector<at::Tensor> outputs;
        int64_t first = 0;
        for (std::size_t e = 0; e < counts.size(); ++e) {
          const at::Tensor rows = x.narrow(0, first, counts[e]);
          const at::Tensor w = weights.select(0, static_cast<int64_t>(e));
          outputs.push_back(transposed ? at::matmul(rows, w) : at::linear(rows, w));
          first += counts[e];
        }
        return at::cat(outputs);
      });
}

// Each group's weight gradient gᵀ x over its rows, stacked: [groups, out, in].
at::Tensor stacked_weight_gradient(const at::Tensor& g, const at::Tensor& x,
                                   const std::vector<int64_t>& counts) {
  return grouped_or_loop(
      {x, g}, x.size(1), g.size(1), counts,
      [&] { return at::_grouped_mm(g.t(), x, group_ends(counts, x)); },
      [&] {
        std::vector<at::Tensor> stacked;
        int64_t first = 0;
        for (const int64_t count : counts) {
          stacked.push_back(g.narrow(0, first, count).t().mm(x.narrow(0, first, count)));
          first += count;
        }
        return at::stack(stacked);
      });
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
          [g, x, counts] { return stacked_weight_gradient(g, x, counts); }, weights);
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
  if (!at::GradMode::is_enabled()) return per_group(x, weights, counts, /*transposed=*/false);
  return SplittableGroupedLinear::apply(x, weights, counts);
}

}  // namespace pipetrain::autograd
