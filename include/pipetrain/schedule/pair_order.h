#pragma once

#include <optional>
#include <vector>

#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/validator.h"

namespace pipetrain::schedule {

// Transports that match the messages between two ranks by their order alone, not by a tag
// per channel (NCCL's point-to-point), need more of a plan than validate() proves.

// The first receive that such a transport would fill with the wrong message: for every
// ordered pair of stages (a, b), the transfers stage a sends to b, in a's instruction order,
// must be the transfers stage b receives from a, in b's order (same flow, chunk and
// micro-batch, one for one). Nothing when every pair's orders agree.
std::optional<Violation> first_order_mismatch(const PipelinePlan& plan);

// Whether a transport that matches by order alone and whose sends block until their receive
// takes them (NCCL's send, one at a time on one stream) can carry every transfer of `plan`:
// the orders agree, and the plan runs with sends that wait for their receive
// (validate(plan, SendMode::kSynchronous)). A schedule in which neighbours send to each
// other at once fails the second; it needs its sends and receives grouped instead.
bool runs_matched_by_order(const PipelinePlan& plan);

// Whether every transfer of a pipe of `shape` is between neighbouring stages: one chunk, two
// stages, or two chunks placed in a V (no ring link from the last stage to the first).
bool neighbours_only(const PipeShape& shape);

// Whether the engine carries a pipe of `kind` on `shape` over NCCL (a communicator per
// direction between neighbours, matched by order): neighbours_only, and every pair's orders
// agree in the training plan and in the evaluation and inference plans. The planner costs
// the others' pipes through host memory on a GPU.
bool pipe_fits_nccl(Kind kind, const PipeShape& shape);

// A run of consecutive transfers within one step, posted together and waited for together
// (NCCL's ncclGroupStart/End, Megatron's batch_isend_irecv): the unit a grouped executor
// issues. Instructions of other kinds each form a group of their own.
struct TransferGroup {
  int step = 0;
  int first = 0;  // index of its first instruction in the step
  int count = 1;
};
std::vector<TransferGroup> transfer_groups(const std::vector<Step>& steps);

// The first group at which stages deadlock when every transfer group completes only once
// each of its transfers' other ends has been posted (the peer has reached the group that
// holds it), with transfers matched per pair of stages by order alone; also a group that
// receives into a buffer it sends from. Nothing when the plan runs so (with agreeing orders:
// see first_order_mismatch).
std::optional<Violation> first_grouped_deadlock(const PipelinePlan& plan);

}  // namespace pipetrain::schedule
