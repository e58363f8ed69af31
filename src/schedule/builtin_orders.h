#pragma once

#include <vector>

#include "pipetrain/schedule/compute_order.h"
#include "pipetrain/schedule/schedule.h"

// The built-in compute orders (see pipetrain/schedule/compute_order.h).
namespace pipetrain::schedule {

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

}  // namespace pipetrain::schedule
