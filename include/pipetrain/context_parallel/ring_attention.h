#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>

#include "pipetrain/comm/communicator.h"

// Context parallelism's attention (Megatron's context_parallel, torchtitan's ring
// attention): each rank of a context group holds a slice of the sequence, and the keys and
// values travel around the ring of ranks while every rank attends its own queries to each
// block in turn. The partial results are merged exactly by their log-sum-exp. One autograd
// node keeps only q, k, v, the output and its log-sum-exp, never a block's scores: backward
// passes the keys and values around the ring again, recomputes each block's probabilities,
// and sends each block's key and value gradients with it back to its owner (the
// memory-efficient formulation of ring and flash attention), so attention's memory per rank
// grows with the local slice, not with the square of the sequence (except under attention
// dropout, whose mask rows it keeps: see RingAttentionOptions). Blocks are computed with
// ATen's fused kernels where one fits (fused_attention.h: CPU flash, CUDA flash or
// memory-efficient), else in plain operators.
namespace pipetrain::context_parallel {

// The ranks that split one sequence between them. Without a communicator, one rank holding
// the whole sequence. Each pass around the ring is one exchange with the two neighbours
// (Communicator::all_to_all), grouped as NCCL needs: the context group's communicator,
// NCCL where every rank has a GPU of its own, else MPI (staged through the host).
struct Group {
  std::shared_ptr<comm::Communicator> comm;

  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
  bool parallel() const { return size() > 1; }
};

// Whether `group` splits sequences here and now: more than one rank and no WholeSequences
// in scope on this thread (whole_sequences.h).
bool splits(const Group& group);

// The positions of a sequence of `whole` that `rank` of `size` holds, in order: the
// sequence is cut into 2 x size equal chunks and rank i holds chunks i and 2 x size - 1 - i
// (so every rank has as much causal work as the others, as Megatron and torchtitan cut
// it). int64 [whole / size]. Throws std::invalid_argument unless 2 x size divides `whole`
// (or size is 1: every position).
at::Tensor local_positions(int64_t whole, int rank, int size);

// This rank's slice of `x` along `dim` (a sequence of x.size(dim) positions), as
// local_positions cuts it; `x` itself where the group does not split (splits()).
at::Tensor take_local(const at::Tensor& x, int64_t dim, const Group& group);

struct RingAttentionOptions {
  bool causal = true;
  // Packed documents: int64 [batch, local seq], the document of each of this rank's
  // positions; a position sees only positions of its own document.
  std::optional<at::Tensor> documents;
  // 1 / sqrt(head dim) unless set.
  std::optional<double> scale;
  // Attention dropout: which weights of this rank's queries over every position of the
  // sequence are kept, 1 or 0 ([batch, heads, local seq, whole seq]), as dropout of the
  // whole sequence's weights draws them; kept weights are divided by 1 - dropout_p after the
  // softmax. Blocks are then computed in plain operators, and the node keeps this mask too.
  std::optional<at::Tensor> dropout_kept;
  double dropout_p = 0;
};

// Attention of this rank's queries over the whole sequence's keys and values.
// q: [batch, heads, local seq, head dim]; k, v: [batch, kv heads, local seq, head dim]
// (kv heads dividing heads: grouped-query attention, query head h reading kv head
// h / (heads / kv heads)); positions: int64 [local seq], the global position of each
// local position (every rank of the group passes its own, of the same length). Returns
// [batch, heads, local seq, head dim]. Every position must see at least one key (itself,
// under a causal mask). Blocks the mask leaves empty are skipped.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& positions, const Group& group,
                          const RingAttentionOptions& options = {});

}  // namespace pipetrain::context_parallel
