#pragma once

#include <ATen/core/Tensor.h>

#include "pipetrain/context_parallel/ring_attention.h"
#include "pipetrain/tensor_parallel/group.h"

// Megatron-LM's sequence parallelism (Korthikanti et al., arXiv 2205.05198): outside the
// parallel linears the activations [batch, seq, ...] are split along the sequence over the
// tensor-parallel group, so the norms, dropout and residual stream hold 1/size of them.
// An all-gather along the sequence enters a column-parallel linear (its backward a
// reduce-scatter) and a reduce-scatter leaves a row-parallel one (its backward an
// all-gather), in place of the identity and all-reduce of plain tensor parallelism.
// Replicated parameters that see only the local slice (norms, biases, positions) have
// their gradients summed over the group.
namespace pipetrain::tensor_parallel {

// Whether `group` splits the sequence here and now: sequence parallelism on, more than one
// rank, and no context_parallel::WholeSequences in scope on this thread (generation).
bool splits_sequence(const Group& group);

// Where a replicated (or sequence-split) activation enters a region computed in shards:
// the whole sequence, all-gathered along dimension 1 under sequence parallelism (backward:
// reduce-scatter), else copy_to_group.
at::Tensor enter_parallel_region(const at::Tensor& x, const Group& group);

// x Wᵀ + b for a column-parallel weight (this rank's output features): `x` replicated, or
// under sequence parallelism this rank's slice of the sequence, gathered inside the product
// so that only the slice is kept for backward (the weight gradient gathers it again, as
// Megatron's sequence-parallel linear does). The input's gradient is summed over the group.
at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, const Group& group);

// Where the shards' partial sums leave the region: this rank's slice of the sequence of
// their sum under sequence parallelism (backward: all-gather), else reduce_from_group.
at::Tensor leave_parallel_region(const at::Tensor& x, const Group& group);

// A replicated parameter used on this rank's slice of the sequence: its gradient summed
// over the group under sequence parallelism, so every rank steps it alike; else itself.
at::Tensor sequence_shared(const at::Tensor& parameter, const Group& group);

// Dropout of this rank's slice of the sequence as dropout of the whole would draw it: the
// mask is drawn for the whole sequence ([batch, whole seq, ...]) and this rank's positions
// taken from it (its context-parallel chunks, then its sequence-parallel share of those),
// so the generators of both groups stay in step and training depends on neither size.
// Where neither group splits the sequence, at::dropout.
at::Tensor sequence_dropout(const at::Tensor& x, double p, bool training, const Group& group,
                            const context_parallel::Group& context = {});

// The positions [first, first + length) of the whole sequence this rank's slice holds:
// its share under sequence parallelism, else all of them.
struct SequenceSlice {
  int64_t first = 0;
  int64_t length = 0;
};
SequenceSlice local_sequence(int64_t whole, const Group& group);

}  // namespace pipetrain::tensor_parallel
