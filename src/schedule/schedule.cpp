#include "pipetrain/schedule/schedule.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "builtin_orders.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/deepspeed_schedules.h"

namespace pipetrain::schedule {
namespace {

const std::vector<ScheduleKind> kKinds = {
    {Kind::k1F1B, "train", "DeepSpeed's synchronous 1F1B (TrainSchedule)", true, false, false},
    {Kind::kInference, "inference",
     "DeepSpeed's forward-only pipeline (InferenceSchedule); over --chunks > 1 model chunks, "
     "forwards in Megatron's interleaved order",
     false, true, false, Placement::kLoop, 1, 0},
    {Kind::kDataParallel, "data-parallel", "no pipeline: forward and backward per micro-batch",
     true, false, false},
    {Kind::kGpipe, "gpipe", "GPipe: all forwards, then all backwards", true, false, false},
    {Kind::kInterleaved, "interleaved",
     "Megatron's interleaved 1F1B over --chunks model chunks per stage", true, true, false,
     Placement::kLoop, 1, 0},
    {Kind::kZbH1, "zb-h1", "zero-bubble ZB-H1: weight gradients deferred into the bubbles", true,
     false, true},
    {Kind::kZbH2, "zb-h2", "zero-bubble ZB-H2: 2P-1 warm-up forwards, no bubble when F = B-W = W",
     true, false, true},
    {Kind::kInterleavedZb, "interleaved-zb",
     "PyTorch's ScheduleInterleavedZeroBubble (ZB1P) over --chunks looped chunks", true, true, true,
     Placement::kLoop, 1, 0},
    {Kind::kLoopedBfs, "looped-bfs",
     "PyTorch's ScheduleLoopedBFS: breadth first over --chunks looped chunks", true, true, false,
     Placement::kLoop, 1, 0},
    {Kind::kZbv, "zbv", "PyTorch's ScheduleZBVZeroBubble: two chunks per stage in a V", true, true,
     true, Placement::kV, 2, 2},
    {Kind::kDualPipeV, "dualpipev",
     "DeepSeek's DualPipeV (PyTorch's ScheduleDualPipeV): two chunks in a V, m >= 2P", true, true,
     true, Placement::kV, 2, 2},
    {Kind::kFile, "file",
     "compute orders from a CSV file in PyTorch's layout (--file): lowered, validated, "
     "simulated",
     true, true, false, Placement::kLoop, 1, 0},
};

std::string chunk_words(int n) {
  return std::to_string(n) + (n == 1 ? " chunk" : " chunks");
}

void check_shape(const ScheduleKind& kind, const PipeShape& shape) {
  if (shape.micro_batches < 1) {
    throw io::InputError("micro-batches must be at least 1, got " +
                         std::to_string(shape.micro_batches));
  }
  if (shape.stages < 1) {
    throw io::InputError("stages must be at least 1, got " + std::to_string(shape.stages));
  }
  if (shape.chunks < 1) {
    throw io::InputError("chunks must be at least 1, got " + std::to_string(shape.chunks));
  }
  check_work_bounds(shape);
  const std::string named = "schedule '" + std::string(kind.name) + "'";
  if (!kind.uses_chunks && shape.chunks != 1) {
    throw io::InputError(named + " has one model chunk per stage, got chunks " +
                         std::to_string(shape.chunks));
  }
  if (shape.chunks < kind.min_chunks || (kind.max_chunks > 0 && shape.chunks > kind.max_chunks)) {
    throw io::InputError(named + " needs " + chunk_words(kind.min_chunks) + " per stage, got " +
                         std::to_string(shape.chunks));
  }
  if (shape.chunks > 1 && kind.trains && shape.placement != kind.placement) {
    throw io::InputError(named + " places its chunks " +
                         (kind.placement == Placement::kV ? "in a V" : "in a loop") +
                         ", not as the shape says");
  }
  // With a partial last group of micro-batches Megatron's interleaved order can wait in a
  // cycle (e.g. m=7, p=5); like Megatron before group sizes were configurable, refuse it.
  if (kind.kind == Kind::kInterleaved && shape.chunks > 1 &&
      shape.micro_batches % shape.stages != 0) {
    throw io::InputError("the interleaved schedule needs micro-batches divisible by stages, got " +
                         std::to_string(shape.micro_batches) + " micro-batches for " +
                         std::to_string(shape.stages) + " stages");
  }
  // PyTorch's condition: rounds of up to P micro-batches, all of one size.
  if (kind.kind == Kind::kInterleavedZb) {
    const int rounds = std::max(1, shape.micro_batches / shape.stages);
    if (shape.micro_batches % rounds != 0) {
      throw io::InputError("schedule 'interleaved-zb' needs micro-batches divisible by its " +
                           std::to_string(rounds) + " rounds (micro-batches / stages), got " +
                           std::to_string(shape.micro_batches));
    }
  }
  if (kind.kind == Kind::kDualPipeV && shape.micro_batches < 2 * shape.stages) {
    throw io::InputError(
        "schedule 'dualpipev' needs at least 2 x stages = " + std::to_string(2 * shape.stages) +
        " micro-batches, got " + std::to_string(shape.micro_batches));
  }
}

// Null for the kinds written step by step (DeepSpeed's).
std::vector<ComputeOrder> (*order_function(Kind kind, const PipeShape& shape))(const PipeShape&) {
  switch (kind) {
    case Kind::kInference:
      return shape.chunks > 1 ? forward_order : nullptr;
    case Kind::kGpipe:
      return gpipe_order;
    case Kind::kInterleaved:
      return interleaved_1f1b_order;
    case Kind::kZbH1:
      return zb_h1_order;
    case Kind::kZbH2:
      return zb_h2_order;
    case Kind::kInterleavedZb:
      return interleaved_zero_bubble_order;
    case Kind::kLoopedBfs:
      return looped_bfs_order;
    case Kind::kZbv:
      return zbv_order;
    case Kind::kDualPipeV:
      return dualpipev_order;
    case Kind::k1F1B:
    case Kind::kDataParallel:
    case Kind::kFile:
      return nullptr;
  }
  return nullptr;
}

std::unique_ptr<Schedule> make_deepspeed_schedule(Kind kind, const PipeShape& shape, int stage_id) {
  switch (kind) {
    case Kind::k1F1B:
      return std::make_unique<TrainSchedule>(shape, stage_id);
    case Kind::kInference:
      return std::make_unique<InferenceSchedule>(shape, stage_id);
    case Kind::kDataParallel:
      return std::make_unique<DataParallelSchedule>(shape, stage_id);
    default:
      throw std::logic_error("schedule '" + std::string(name(kind)) + "' has no step-by-step form");
  }
}

}  // namespace

void check_work_bounds(const PipeShape& shape) {
  // Well past any pipeline trained, far short of what would exhaust memory: a plan holds a
  // few instructions per pass and a step per stage and round (at least m + 2P rounds).
  constexpr int64_t kMostMicroBatches = 1 << 16, kMostStages = 1 << 12, kMostChunks = 64;
  constexpr int64_t kMostWork = int64_t{1} << 24;
  auto bound = [](const char* what, int64_t value, int64_t most) {
    if (value > most)
      throw io::InputError(std::string(what) + " must be at most " + std::to_string(most) +
                           ", got " + std::to_string(value));
  };
  bound("micro-batches", shape.micro_batches, kMostMicroBatches);
  bound("stages", shape.stages, kMostStages);
  bound("chunks", shape.chunks, kMostChunks);
  const int64_t p = shape.stages, v = shape.chunks, m = shape.micro_batches;
  bound("stages x chunks x (micro-batches + stages)", p * v * (m + 2 * p), kMostWork);
}

bool plannable(const PipeShape& shape) {
  try {
    check_work_bounds(shape);
    return true;
  } catch (const io::InputError&) {
    return false;
  }
}

void check_stage_id(const PipeShape& shape, int stage_id) {
  if (stage_id < 0 || stage_id >= shape.stages) {
    throw io::InputError("stage " + std::to_string(stage_id) + " is out of range for " +
                         std::to_string(shape.stages) + " stages (0.." +
                         std::to_string(shape.stages - 1) + ")");
  }
}

Schedule::Schedule(const PipeShape& shape, int stage_id) : shape_(shape), stage_id_(stage_id) {
  check_stage_id(shape, stage_id);
}

Peer transfer_peer(const PipeShape& shape, int stage, const Instruction& transfer) {
  const int vs = shape.virtual_stage(stage, transfer.chunk);
  const bool downstream =
      transfer.kind == OpKind::kSendActivation || transfer.kind == OpKind::kRecvGrad;
  const bool upstream =
      transfer.kind == OpKind::kRecvActivation || transfer.kind == OpKind::kSendGrad;
  if (!downstream && !upstream) {
    throw std::logic_error(std::string(name(transfer.kind)) + " is not a transfer");
  }
  const int other = downstream ? vs + 1 : vs - 1;
  if (other < 0 || other >= shape.virtual_stages()) {
    throw std::logic_error(std::string(name(transfer.kind)) + " on virtual stage " +
                           std::to_string(vs) + " has no peer");
  }
  return {shape.stage_of(other), shape.chunk_of(other)};
}

bool is_local_transfer(const PipeShape& shape, int stage, const Instruction& transfer) {
  return transfer_peer(shape, stage, transfer).stage == stage;
}

const std::vector<ScheduleKind>& schedule_kinds() {
  return kKinds;
}

const ScheduleKind& schedule_kind(Kind kind) {
  for (const auto& info : kKinds) {
    if (info.kind == kind) return info;
  }
  throw std::logic_error("a schedule kind outside the table");
}

std::string_view name(Kind kind) {
  return schedule_kind(kind).name;
}

const ScheduleKind& schedule_kind(std::string_view name) {
  for (const auto& kind : kKinds) {
    if (kind.name == name) return kind;
  }
  std::string known;
  for (const auto& kind : kKinds) known += (known.empty() ? "" : ", ") + std::string(kind.name);
  throw io::InputError("unknown schedule kind '" + std::string(name) + "' (known: " + known + ")");
}

PipeShape shape_for(Kind kind, int micro_batches, int stages, int chunks) {
  const ScheduleKind& info = schedule_kind(kind);
  return {micro_batches, stages, chunks > 0 ? chunks : std::max(1, info.min_chunks),
          info.placement};
}

PipelinePlan plan_pipeline(Kind kind, const PipeShape& shape) {
  if (kind == Kind::kFile)
    throw std::logic_error("a schedule file is planned by plan_schedule_file");
  const ScheduleKind& info = schedule_kind(kind);
  check_shape(info, shape);
  PipelinePlan plan{kind, shape, info.trains, info.splits_backward, {}, {}};
  if (auto order = order_function(kind, shape)) {
    LockstepPlan built = build_lockstep(shape, order(shape));
    plan.num_pipe_buffers = std::move(built.num_pipe_buffers);
    plan.stage_steps = std::move(built.stage_steps);
    return plan;
  }
  for (int s = 0; s < shape.stages; ++s) {
    const auto schedule = make_deepspeed_schedule(kind, shape, s);
    plan.num_pipe_buffers.push_back(schedule->num_pipe_buffers());
    plan.stage_steps.push_back(schedule->steps());
  }
  return plan;
}

int peak_live(const PipelinePlan& plan, int stage) {
  if (!plan.trains) return 0;
  int live = 0;
  int peak = 0;
  for (const Step& step : plan.stage_steps.at(stage)) {
    for (const Instruction& in : step) {
      if (in.kind == OpKind::kForwardPass) peak = std::max(peak, ++live);
      if (in.kind == OpKind::kBackwardPass || in.kind == OpKind::kBackwardWeight) --live;
    }
  }
  return peak;
}

PipelinePlan plan_pipeline(std::string_view name, const PipeShape& shape) {
  const ScheduleKind& kind = schedule_kind(name);
  PipeShape shaped = shape;
  shaped.placement = kind.placement;
  if (shaped.chunks == 1 && kind.min_chunks > 1) shaped.chunks = kind.min_chunks;
  return plan_pipeline(kind.kind, shaped);
}

}  // namespace pipetrain::schedule
