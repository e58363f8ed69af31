#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "pipetrain/comm/communicator.h"

// Expert parallelism (Megatron's expert-model-parallel group): the experts of each MoE
// layer are split over a group of ranks carved from the data-parallel ranks, and each rank
// sends every token's hidden state to the rank holding the expert that computes it, and the
// results back (all-to-all: Communicator::all_to_all, every send and receive started before
// any is waited for over MPI, one NCCL group over NCCL).
namespace pipetrain::expert_parallel {

// The ranks that split each MoE layer's experts between them, in rank order: rank r holds
// experts [r x E / size, (r + 1) x E / size). Without a communicator, one rank holding every
// expert.
struct Group {
  std::shared_ptr<comm::Communicator> comm;       // the rows (NCCL between GPUs, else MPI)
  std::shared_ptr<comm::Communicator> control{};  // the host's row counts (MPI); null: comm

  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
  bool parallel() const { return size() > 1; }
};

// Rows of `x` ([rows, ...]) dealt out over the group: the first send_rows[0] rows to rank 0,
// the next send_rows[1] to rank 1 and so on; returns the rows received, recv_rows[r] from
// rank r, in rank order. `recv_rows` must be what each rank sends this one
// (exchange_counts). Differentiable: backward sends the gradients back the same way.
at::Tensor all_to_all(const at::Tensor& x, const std::vector<int64_t>& send_rows,
                      const std::vector<int64_t>& recv_rows, const Group& group);

// Bytes of rows this process has sent to other ranks by all_to_all, forward and backward,
// since it started: what expert parallelism costs the links (the counts not included).
int64_t bytes_sent();

// Row r of `counts` ([size, n] int64, on the host) sent to rank r; returns [size, n], row r
// received from rank r.
at::Tensor exchange_counts(const at::Tensor& counts, const Group& group);

}  // namespace pipetrain::expert_parallel
