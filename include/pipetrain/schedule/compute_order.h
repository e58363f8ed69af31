#pragma once

#include <string>
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
  // Runs as one F&B pair with the pass before it (DualPipeV): one step holds both, the
  // forward first.
  bool paired = false;

  bool operator==(const ComputeOp&) const = default;
};

using ComputeOrder = std::vector<ComputeOp>;  // one rank's passes, in execution order

struct LockstepPlan {
  std::vector<std::vector<Step>> stage_steps;
  std::vector<int> num_pipe_buffers;
};

// Runs the orders in synchronous rounds, one pass per rank per round (an F&B pair's two in
// one, once both can run), each as early as its inputs allow. A pass's receive, load, compute and
// send share its step; a buffer is taken at the forward and freed after the backward (or the weight
// gradient), or after the forward's send when the orders only forward. Training orders end with the
// tied and data-parallel reductions and the optimizer step. Throws std::logic_error if the orders
// deadlock, saying who waits for whom.
LockstepPlan build_lockstep(const PipeShape& shape, const std::vector<ComputeOrder>& orders);

// The action's text in PyTorch's CSV layout, e.g. "3I1": the input gradient of micro-batch 1
// on virtual stage 3.
std::string action_text(const PipeShape& shape, int rank, const ComputeOp& op);

}  // namespace pipetrain::schedule
