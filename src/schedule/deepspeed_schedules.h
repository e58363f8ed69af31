#pragma once

#include "pipetrain/schedule/schedule.h"

// DeepSpeed's three schedules, step for step as in docs/spec/schedules.md.
namespace pipetrain::schedule {

// Synchronous 1F1B: forward and backward steps alternate; stage s keeps at most
// min(P - s, M) activations alive.
class TrainSchedule final : public Schedule {
 public:
  using Schedule::Schedule;
  Kind kind() const override { return Kind::k1F1B; }
  int num_pipe_buffers() const override;
  std::vector<Step> steps() const override;

 private:
  // The micro-batch of step `t` and whether the step is a forward step.
  int micro_batch_of_step(int t, bool& forward) const;
};

// Forward only, two alternating buffers.
class InferenceSchedule final : public Schedule {
 public:
  using Schedule::Schedule;
  Kind kind() const override { return Kind::kInference; }
  int num_pipe_buffers() const override { return 2; }
  std::vector<Step> steps() const override;
};

// No pipeline: each micro-batch forward and backward on one stage, gradients accumulate.
class DataParallelSchedule final : public Schedule {
 public:
  DataParallelSchedule(const PipeShape& shape, int stage_id);
  Kind kind() const override { return Kind::kDataParallel; }
  int num_pipe_buffers() const override { return 1; }
  std::vector<Step> steps() const override;
};

}  // namespace pipetrain::schedule
