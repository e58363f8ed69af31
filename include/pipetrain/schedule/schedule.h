#pragma once

#include <memory>
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

// The instruction stream of one stage for one batch. Implementations are pure
// functions of (shape, stage_id): no tensors, no communication.
class Schedule {
 public:
  Schedule(const PipeShape& shape, int stage_id);
  virtual ~Schedule() = default;

  virtual std::string_view kind() const = 0;
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
  std::string_view name;
  std::string_view summary;
  bool trains;           // ends with backward passes and an optimizer step
  bool uses_chunks;      // honours PipeShape::chunks
  bool splits_backward;  // BackwardInput + BackwardWeight instead of BackwardPass
};

const std::vector<ScheduleKind>& schedule_kinds();
const ScheduleKind& schedule_kind(std::string_view name);  // throws InputError if unknown

// Throws InputError naming the bad argument (unknown kind, stages < 1, stage out of range...).
std::unique_ptr<Schedule> make_schedule(std::string_view kind, const PipeShape& shape,
                                        int stage_id);

// Every stage's schedule for one batch: what the validator and the simulator consume.
struct PipelinePlan {
  std::string kind;
  PipeShape shape;
  bool trains = true;
  bool splits_backward = false;
  std::vector<int> num_pipe_buffers;           // per stage
  std::vector<std::vector<Step>> stage_steps;  // per stage
};

PipelinePlan plan_pipeline(std::string_view kind, const PipeShape& shape);

}  // namespace pipetrain::schedule
