#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipetrain/schedule/instruction.h"

namespace pipetrain::schedule {

// The size of one pipelined batch.
struct PipeShape {
  int micro_batches = 1;
  int stages = 1;
  // Model chunks per stage: rank s runs virtual stages s, s+P, s+2P, ... (interleaved 1F1B).
  int chunks = 1;

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
};

// Throws InputError unless 0 <= stage_id < shape.stages.
void check_stage_id(const PipeShape& shape, int stage_id);

// The other end of a transfer.
struct Peer {
  int stage = 0;
  int chunk = 0;
};

// Where a send issued by `stage` goes, or where a receive issued by `stage` comes from.
// Activations flow to the next virtual stage, gradients to the previous one.
Peer transfer_peer(const PipeShape& shape, int stage, const Instruction& transfer);

// The schedules this layer plans. Names (schedule_kind(k).name) are the spec's and the
// command line's; everywhere past parsing a schedule is one of these.
enum class Kind {
  k1F1B,          // "train": DeepSpeed's synchronous 1F1B (TrainSchedule)
  kInference,     // "inference": forward only
  kDataParallel,  // "data-parallel": one stage, forward and backward per micro-batch
  kGpipe,         // "gpipe"
  kInterleaved,   // "interleaved": Megatron's interleaved 1F1B over model chunks
  kZbH1,          // "zb-h1": zero-bubble ZB-H1, backward split in two
};

// The instruction stream of one stage for one batch, for the kinds written step by step
// (DeepSpeed's, deepspeed_schedules.h); the others are built from compute orders
// (compute_order.h). Pure functions of (shape, stage_id): no tensors, no communication.
class Schedule {
 public:
  Schedule(const PipeShape& shape, int stage_id);
  virtual ~Schedule() = default;

  virtual Kind kind() const = 0;
  virtual int num_pipe_buffers() const = 0;
  virtual std::vector<Step> steps() const = 0;

  const PipeShape& shape() const { return shape_; }
  int micro_batches() const { return shape_.micro_batches; }
  int stages() const { return shape_.stages; }
  int stage_id() const { return stage_id_; }
  bool is_first_stage() const { return stage_id_ == 0; }
  bool is_last_stage() const { return stage_id_ == shape_.stages - 1; }

 protected:
  bool valid_micro_batch(int micro_batch) const {
    return micro_batch >= 0 && micro_batch < shape_.micro_batches;
  }

 private:
  PipeShape shape_;
  int stage_id_;
};

struct ScheduleKind {
  Kind kind;
  std::string_view name;
  std::string_view summary;
  bool trains;           // ends with backward passes and an optimizer step
  bool uses_chunks;      // honours PipeShape::chunks
  bool splits_backward;  // BackwardInput + BackwardWeight instead of BackwardPass
};

const std::vector<ScheduleKind>& schedule_kinds();
const ScheduleKind& schedule_kind(Kind kind);
// The kind a user named; throws InputError listing the known names if there is none.
const ScheduleKind& schedule_kind(std::string_view name);
std::string_view name(Kind kind);

// Every stage's schedule for one batch: what the validator and the simulator consume.
struct PipelinePlan {
  Kind kind = Kind::k1F1B;
  PipeShape shape;
  bool trains = true;
  bool splits_backward = false;
  std::vector<int> num_pipe_buffers;           // per stage
  std::vector<std::vector<Step>> stage_steps;  // per stage
};

// Throws InputError naming the bad argument (stages < 1, chunks the kind has not...).
PipelinePlan plan_pipeline(Kind kind, const PipeShape& shape);
// For a kind a user named (the command line's, a test's): schedule_kind(name), then plan.
PipelinePlan plan_pipeline(std::string_view name, const PipeShape& shape);

}  // namespace pipetrain::schedule
