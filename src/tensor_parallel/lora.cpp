#include "pipetrain/tensor_parallel/lora.h"

#include <ATen/ATen.h>

#include <cmath>

#include "pipetrain/autograd/linear.h"
#include "pipetrain/tensor_parallel/collectives.h"
#include "pipetrain/tensor_parallel/sequence_parallel.h"

namespace pipetrain::tensor_parallel {

at::Tensor initial_lora_a(int64_t rank, int64_t in_features) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  return at::empty({rank, in_features}).uniform_(-bound, bound);
}

at::Tensor column_lora(const at::Tensor& x, const at::Tensor& a, const at::Tensor& b,
                       const LoraOptions& options, bool training, const Group& group) {
  // Every rank computes the whole A x (its input gradient summed over the group as the
  // layer's own); each adds its output features' share to A's gradient, summed over the group.
  const at::Tensor dropped = sequence_dropout(x, options.dropout, training, group, {});
  const at::Tensor down = column_parallel_linear(dropped, copy_to_group(a, group), {}, group);
  return autograd::linear(down * options.scale(), b);
}

at::Tensor row_lora(const at::Tensor& x, const at::Tensor& a, const at::Tensor& b,
                    const LoraOptions& options, bool training, const Group& group) {
  // A's input features are this rank's: A x is a share of the whole, and B (A x) too, since
  // B is linear; B's gradient takes every rank's share.
  const at::Tensor dropped =
      training && options.dropout > 0 ? at::dropout(x, options.dropout, training) : x;
  const at::Tensor down = autograd::linear(dropped, a);
  return autograd::linear(down * options.scale(), copy_to_group(b, group));
}

}  // namespace pipetrain::tensor_parallel
