#pragma once

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "pipetrain/schedule/pipe_lanes.h"
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

// One transfer between two stages, as both ends name it, and where it sits in the plan of
// the stage that issues it.
struct PairTransfer {
  Channel channel;
  int receiving_virtual_stage = 0;
  int micro_batch = -1;
  int step = 0;
  int index = 0;
  Instruction instruction;
  // The same transfer (flow, receiving virtual stage, micro-batch).
  bool matches(const PairTransfer& other) const;
};
struct PairTransfers {
  std::vector<PairTransfer> sent, received;  // each in its own stage's order
};
// By (from, to): what `from` sends to `to`, and what `to` receives from `from` (local
// hand-overs left out).
std::map<std::pair<int, int>, PairTransfers> transfers_by_pair(const PipelinePlan& plan);
// The first of `receives` (from pair.first, in pair.second's order) that `sends` (in
// pair.first's order), matched by order alone, would fill with another transfer, or the
// first send with no receive.
std::optional<Violation> first_order_mismatch(const std::pair<int, int>& pair,
                                              const std::vector<PairTransfer>& sends,
                                              const std::vector<PairTransfer>& receives);

// Whether a transport that matches by order alone and whose sends block until their receive
// takes them (NCCL's send, one at a time on one stream) can carry every transfer of `plan`:
// the orders agree, and the plan runs with sends that wait for their receive
// (validate(plan, SendMode::kSynchronous)). A schedule in which neighbours send to each
// other at once fails the second; it needs its sends and receives grouped instead.
bool runs_matched_by_order(const PipelinePlan& plan);

// Whether the engine carries a pipe of `kind` on `shape` over NCCL: pipe_lanes finds lanes
// for its training plan and its evaluation and inference plans (every built-in schedule
// has them). The planner costs the others' pipes through host memory on a GPU.
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
