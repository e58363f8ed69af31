#pragma once

#include <vector>

#include "pipetrain/schedule/instruction.h"
#include "pipetrain/schedule/schedule.h"

// Schedules beyond DeepSpeed's are described by the order in which each rank runs its
// compute (forward, backward, weight-gradient) passes; the lockstep builder turns
// those orders into steps with transfers and buffers.
namespace pipetrain::schedule {

struct ComputeOp {
  OpKind kind{};  // kForwardPass, kBackwardPass, kBackwardInput or kBackwardWeight
  int micro_batch = 0;
  int chunk = 0;
  // Runs as one F&B pair with the pass before it (DualPipeV); one after the other here.
  bool paired = false;
};

using ComputeOrder = std::vector<ComputeOp>;  // one rank's passes, in execution order

// Forwards only, through every chunk: what inference over interleaved chunks runs.
std::vector<ComputeOrder> forward_order(const PipeShape& shape);

// All forwards, then all backwards (GPipe).
std::vector<ComputeOrder> gpipe_order(const PipeShape& shape);

// Megatron's interleaved 1F1B over `chunks` virtual stages per rank; plain 1F1B when
// chunks == 1.
std::vector<ComputeOrder> interleaved_1f1b_order(const PipeShape& shape);

// ZB-H1 (Qi et al., ICLR 2024): backward split into input and weight gradients, weight
// gradients deferred so that at most P micro-batches are in flight, as in 1F1B.
std::vector<ComputeOrder> zb_h1_order(const PipeShape& shape);

// ZB-H2 (Qi et al., section 3): more warm-up forwards (up to 2(P-s)-1 micro-batches live
// on stage s, 2P-1 on the first) and weight gradients pushed to the tail, so that with
// F = B-W = W each stage runs without a gap from its first pass to its last, the stages
// forming a parallelogram. The order is what a stage does when passes take one tick each
// and it prefers a ready input gradient, then a forward, then a weight gradient.
std::vector<ComputeOrder> zb_h2_order(const PipeShape& shape);

// torch.distributed.pipelining's orders (torch_orders.cpp), each rank's passes as
// PyTorch 2.15's schedule class orders them.
// ScheduleLoopedBFS: every forward of chunk 0, then of chunk 1, ...; backwards from the
// last chunk and the last micro-batch down.
std::vector<ComputeOrder> looped_bfs_order(const PipeShape& shape);
// ScheduleInterleavedZeroBubble (ZB1P over looped chunks).
std::vector<ComputeOrder> interleaved_zero_bubble_order(const PipeShape& shape);
// ScheduleZBVZeroBubble: two chunks in a V (shape.placement kV).
std::vector<ComputeOrder> zbv_order(const PipeShape& shape);
// ScheduleDualPipeV: two chunks in a V, needs m >= 2P.
std::vector<ComputeOrder> dualpipev_order(const PipeShape& shape);

struct LockstepPlan {
  std::vector<std::vector<Step>> stage_steps;
  std::vector<int> num_pipe_buffers;
};

// Runs the orders in synchronous rounds, one pass per rank per round, each as early as
// its inputs allow. A pass's receive, load, compute and send share its step; a buffer
// is taken at the forward and freed after the backward (or the weight gradient), or after
// the forward's send when the orders only forward. Training orders end with the tied and
// data-parallel reductions and the optimizer step. Throws std::logic_error if the orders
// deadlock.
LockstepPlan build_lockstep(const PipeShape& shape, const std::vector<ComputeOrder>& orders);

}  // namespace pipetrain::schedule
