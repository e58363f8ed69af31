#include <algorithm>

#include "schedule/deepspeed_schedules.h"

namespace pipetrain::schedule {

int TrainSchedule::num_pipe_buffers() const {
  return std::max(2, std::min(stages() - stage_id(), micro_batches()));
}

int TrainSchedule::micro_batch_of_step(int t, bool& forward) const {
  const int s = stage_id();
  const int p = stages();
  const bool even_step = t % 2 == 0;
  const bool even_stage = s % 2 == 0;
  forward = even_step == even_stage;
  if (even_step && even_stage) return t / 2 - s / 2;
  if (!even_step && !even_stage) return (t - 1) / 2 - s / 2;
  if (even_step) return t / 2 - p + (s + 1) / 2;  // odd stage, backward
  return (t - 1) / 2 - p + 1 + s / 2;             // even stage, backward
}

std::vector<Step> TrainSchedule::steps() const {
  const int total_steps = 2 * (micro_batches() + stages() - 1);
  const int buffers = num_pipe_buffers();
  const bool has_prev_stage = !is_first_stage();
  const bool has_next_stage = !is_last_stage();
  auto on = [&](OpKind kind, int micro_batch) {
    return Instruction{kind, micro_batch % buffers, 0, micro_batch};
  };

  std::vector<Step> steps(total_steps);
  int prev = -1;
  for (int t = 0; t < total_steps; ++t) {
    bool forward = false;
    const int cur = micro_batch_of_step(t, forward);
    Step& step = steps[t];
    if (forward) {
      if (valid_micro_batch(prev) && has_prev_stage) step.push_back(on(OpKind::kSendGrad, prev));
      if (valid_micro_batch(cur) && has_prev_stage) {
        step.push_back(on(OpKind::kRecvActivation, cur));
      }
    } else {
      if (valid_micro_batch(cur) && has_next_stage) step.push_back(on(OpKind::kRecvGrad, cur));
      if (valid_micro_batch(prev) && has_next_stage) {
        step.push_back(on(OpKind::kSendActivation, prev));
      }
    }
    if (forward && valid_micro_batch(cur) && (is_first_stage() || is_last_stage())) {
      step.push_back(on(OpKind::kLoadMicroBatch, cur));
    }
    if (valid_micro_batch(cur)) {
      step.push_back(on(forward ? OpKind::kForwardPass : OpKind::kBackwardPass, cur));
    }
    if (t == total_steps - 1) {
      step.push_back({OpKind::kReduceTiedGrads});
      step.push_back({OpKind::kReduceGrads});
      step.push_back({OpKind::kOptimizerStep});
    }
    prev = cur;
  }
  return steps;
}

}  // namespace pipetrain::schedule
