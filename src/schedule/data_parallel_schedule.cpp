#include "pipetrain/io/errors.h"
#include "schedule/deepspeed_schedules.h"

namespace pipetrain::schedule {

DataParallelSchedule::DataParallelSchedule(const PipeShape& shape, int stage_id)
    : Schedule(shape, stage_id) {
  if (shape.stages != 1) {
    throw io::InputError(
        "the data-parallel schedule runs without a pipeline: stages must be 1, got " +
        std::to_string(shape.stages));
  }
}

std::vector<Step> DataParallelSchedule::steps() const {
  std::vector<Step> steps(micro_batches());
  for (int mb = 0; mb < micro_batches(); ++mb) {
    steps[mb] = {{OpKind::kLoadMicroBatch, 0, 0, mb},
                 {OpKind::kForwardPass, 0, 0, mb},
                 {OpKind::kBackwardPass, 0, 0, mb}};
  }
  steps.back().push_back({OpKind::kReduceGrads});
  steps.back().push_back({OpKind::kOptimizerStep});
  return steps;
}

}  // namespace pipetrain::schedule
