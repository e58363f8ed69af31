#include "pipetrain/tensor_parallel/lora.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "autograd/linear.h"
#include "tensor_parallel/collectives.h"

namespace pipetrain::tensor_parallel {

at::Tensor initial_lora_a(int64_t rank, int64_t in_features) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  return at::empty({rank, in_features}).uniform_(-bound, bound);
}

at::Tensor column_lora(const at::Tensor& whole, const at::Tensor& a, const at::Tensor& b,
                       const LoraOptions& options, bool training, const Group& group) {
  // Every rank computes the whole A x; each adds its output features' share to A's
  // gradient, summed over the group. The input is replicated (the same mask everywhere).
  const at::Tensor dropped =
      training && options.dropout > 0 ? at::dropout(whole, options.dropout, true) : whole;
  const at::Tensor down = autograd::linear(dropped, copy_to_group(a, group));
  return autograd::linear(down * options.scale(), b);
}

at::Tensor row_lora(const at::Tensor& x, const at::Tensor& a, const at::Tensor& b,
                    const LoraOptions& options, bool training, const Group& group) {
  at::Tensor dropped = x;
  if (training && options.dropout > 0 && group.parallel()) {
    // The mask of the whole input features, as one process draws it; this rank's columns.
    std::vector<int64_t> whole = x.sizes().vec();
    whole.back() *= group.size();
    at::Tensor mask = at::empty(whole, x.options()).bernoulli_(1 - options.dropout);
    mask.div_(1 - options.dropout);
    dropped = x * mask.narrow(-1, group.rank() * x.size(-1), x.size(-1));
  } else if (training && options.dropout > 0) {
    dropped = at::dropout(x, options.dropout, true);
  }
  // A's input features are this rank's: A x is a share of the whole, and B (A x) too, since
  // B is linear; B's gradient takes every rank's share.
  const at::Tensor down = autograd::linear(dropped, a);
  return autograd::linear(down * options.scale(), copy_to_group(b, group));
}

}  // namespace pipetrain::tensor_parallel
