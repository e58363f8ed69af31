#include "schedule/deepspeed_schedules.h"

namespace pipetrain::schedule {

std::vector<Step> InferenceSchedule::steps() const {
  const int total_steps = micro_batches() + stages() - 1;
  const bool even_stage = stage_id() % 2 == 0;
  std::vector<Step> steps(total_steps);
  for (int t = 0; t < total_steps; ++t) {
    const int micro_batch = t - stage_id();
    // The two buffers alternate, in opposite phase on neighbouring stages.
    const int recv_buffer = even_stage ? t % 2 : (t + 1) % 2;
    const int send_buffer = even_stage ? (t + 1) % 2 : t % 2;
    Step& step = steps[t];
    if (valid_micro_batch(micro_batch) && (is_first_stage() || is_last_stage())) {
      step.push_back({OpKind::kLoadMicroBatch, recv_buffer, 0, micro_batch});
    }
    const bool send = !is_last_stage() && valid_micro_batch(micro_batch - 1);
    const bool recv = !is_first_stage() && valid_micro_batch(micro_batch);
    const Instruction send_op{OpKind::kSendActivation, send_buffer, 0, micro_batch - 1};
    const Instruction recv_op{OpKind::kRecvActivation, recv_buffer, 0, micro_batch};
    // Even stages send first and odd stages receive first, so blocking pairs meet.
    if (even_stage) {
      if (send) step.push_back(send_op);
      if (recv) step.push_back(recv_op);
    } else {
      if (recv) step.push_back(recv_op);
      if (send) step.push_back(send_op);
    }
    if (valid_micro_batch(micro_batch)) {
      step.push_back({OpKind::kForwardPass, recv_buffer, 0, micro_batch});
    }
  }
  return steps;
}

}  // namespace pipetrain::schedule
