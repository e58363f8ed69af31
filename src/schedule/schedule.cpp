#include "pipetrain/schedule/schedule.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "builtin_orders.h"
#include "pipetrain/io/errors.h"
#include "schedule/deepspeed_schedules.h"

namespace pipetrain::schedule {
namespace {

// With a partial last group of micro-batches Megatron's interleaved order can wait in a
// cycle (e.g. m=7, p=5); like Megatron before group sizes were configurable, refuse it.
void interleaved_rule(const PipeShape& shape) {
  if (shape.chunks > 1 && shape.micro_batches % shape.stages != 0) {
    throw io::InputError("the interleaved schedule needs micro-batches divisible by stages, got " +
                         std::to_string(shape.micro_batches) + " micro-batches for " +
                         std::to_string(shape.stages) + " stages");
  }
}

// PyTorch's condition: rounds of up to P micro-batches, all of one size.
void interleaved_zero_bubble_rule(const PipeShape& shape) {
  const int rounds = std::max(1, shape.micro_batches / shape.stages);
  if (shape.micro_batches % rounds != 0) {
    throw io::InputError("schedule 'interleaved-zb' needs micro-batches divisible by its " +
                         std::to_string(rounds) + " rounds (micro-batches / stages), got " +
                         std::to_string(shape.micro_batches));
  }
}

void dualpipev_rule(const PipeShape& shape) {
  if (shape.micro_batches < 2 * shape.stages) {
    throw io::InputError(
        "schedule 'dualpipev' needs at least 2 x stages = " + std::to_string(2 * shape.stages) +
        " micro-batches, got " + std::to_string(shape.micro_batches));
  }
}

template <typename Written>
std::unique_ptr<Schedule> written(const PipeShape& shape, int stage_id) {
  return std::make_unique<Written>(shape, stage_id);
}

// The registry: one row per kind.
const std::vector<ScheduleKind> kKinds = {
    {.kind = Kind::k1F1B,
     .name = "train",
     .summary = "DeepSpeed's synchronous 1F1B (TrainSchedule)",
     .trains = true,
     .uses_chunks = false,
     .splits_backward = false,
     .config_names = {"1f1b", "train"},
     .planned = true,
     .steps = written<TrainSchedule>},
    {.kind = Kind::kInference,
     .name = "inference",
     .summary = "DeepSpeed's forward-only pipeline (InferenceSchedule); over --chunks > 1 model "
                "chunks, forwards in Megatron's interleaved order",
     .trains = false,
     .uses_chunks = true,
     .splits_backward = false,
     .max_chunks = 0,
     .order = forward_order,
     .steps = written<InferenceSchedule>},
    {.kind = Kind::kDataParallel,
     .name = "data-parallel",
     .summary = "no pipeline: forward and backward per micro-batch",
     .trains = true,
     .uses_chunks = false,
     .splits_backward = false,
     .steps = written<DataParallelSchedule>},
    {.kind = Kind::kGpipe,
     .name = "gpipe",
     .summary = "GPipe: all forwards, then all backwards",
     .trains = true,
     .uses_chunks = false,
     .splits_backward = false,
     .config_names = {"gpipe"},
     .planned = true,
     .order = gpipe_order},
    {.kind = Kind::kInterleaved,
     .name = "interleaved",
     .summary = "Megatron's interleaved 1F1B over --chunks model chunks per stage",
     .trains = true,
     .uses_chunks = true,
     .splits_backward = false,
     .max_chunks = 0,
     .config_names = {"interleaved"},
     .min_config_chunks = 2,
     .planned = true,
     .order = interleaved_1f1b_order,
     .shape_rule = interleaved_rule},
    {.kind = Kind::kZbH1,
     .name = "zb-h1",
     .summary = "zero-bubble ZB-H1: weight gradients deferred into the bubbles",
     .trains = true,
     .uses_chunks = false,
     .splits_backward = true,
     .config_names = {"zb-h1"},
     .planned = true,
     .order = zb_h1_order},
    {.kind = Kind::kZbH2,
     .name = "zb-h2",
     .summary = "zero-bubble ZB-H2: 2P-1 warm-up forwards, no bubble when F = B-W = W",
     .trains = true,
     .uses_chunks = false,
     .splits_backward = true,
     .config_names = {"zb-h2"},
     .planned = true,
     .order = zb_h2_order},
    {.kind = Kind::kInterleavedZb,
     .name = "interleaved-zb",
     .summary = "PyTorch's ScheduleInterleavedZeroBubble (ZB1P) over --chunks looped chunks",
     .trains = true,
     .uses_chunks = true,
     .splits_backward = true,
     .max_chunks = 0,
     .config_names = {"interleaved-zb"},
     .planned = true,
     .order = interleaved_zero_bubble_order,
     .shape_rule = interleaved_zero_bubble_rule},
    {.kind = Kind::kLoopedBfs,
     .name = "looped-bfs",
     .summary = "PyTorch's ScheduleLoopedBFS: breadth first over --chunks looped chunks",
     .trains = true,
     .uses_chunks = true,
     .splits_backward = false,
     .max_chunks = 0,
     .config_names = {"looped-bfs"},
     .order = looped_bfs_order},
    {.kind = Kind::kZbv,
     .name = "zbv",
     .summary = "PyTorch's ScheduleZBVZeroBubble: two chunks per stage in a V",
     .trains = true,
     .uses_chunks = true,
     .splits_backward = true,
     .placement = Placement::kV,
     .min_chunks = 2,
     .max_chunks = 2,
     .config_names = {"zbv"},
     .planned = true,
     .order = zbv_order},
    {.kind = Kind::kDualPipeV,
     .name = "dualpipev",
     .summary = "DeepSeek's DualPipeV (PyTorch's ScheduleDualPipeV): two chunks in a V, m >= 2P",
     .trains = true,
     .uses_chunks = true,
     .splits_backward = true,
     .placement = Placement::kV,
     .min_chunks = 2,
     .max_chunks = 2,
     .config_names = {"dualpipev"},
     .planned = true,
     .order = dualpipev_order,
     .shape_rule = dualpipev_rule},
    {.kind = Kind::kFile,
     .name = "file",
     .summary = "compute orders from a CSV file in PyTorch's layout (--file): lowered, "
                "validated, simulated",
     .trains = true,
     .uses_chunks = true,
     .splits_backward = false,
     .max_chunks = 0,
     .config_names = {"file"}},
};

std::string chunk_words(int n) {
  return std::to_string(n) + (n == 1 ? " chunk" : " chunks");
}

}  // namespace

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
  if (kind.shape_rule) kind.shape_rule(shape);
}

bool fits(Kind kind, const PipeShape& shape) {
  try {
    check_shape(schedule_kind(kind), shape);
    return true;
  } catch (const io::InputError&) {
    return false;
  }
}

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

std::string_view config_name(Kind kind) {
  const ScheduleKind& info = schedule_kind(kind);
  return info.config_names.empty() ? info.name : info.config_names.front();
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
  if (info.order && !(info.steps && shape.chunks == 1)) {
    LockstepPlan built = build_lockstep(shape, info.order(shape));
    plan.num_pipe_buffers = std::move(built.num_pipe_buffers);
    plan.stage_steps = std::move(built.stage_steps);
    return plan;
  }
  for (int s = 0; s < shape.stages; ++s) {
    const auto schedule = info.steps(shape, s);
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
