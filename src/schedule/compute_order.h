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
