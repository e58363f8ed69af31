#include "pipetrain/planner/layout.h"

namespace pipetrain::planner {

std::string Layout::schedule_kind() const {
  return std::string(engine::schedule_kind_name(schedule));
}

std::string Layout::schedule_label() const {
  switch (schedule) {
    case engine::PipelineSchedule::kGpipe:
      return "gpipe";
    case engine::PipelineSchedule::kInterleaved:
      return "interleaved x" + std::to_string(chunks);
    case engine::PipelineSchedule::kZbH1:
      return "zb-h1";
    default:
      return "1f1b";
  }
}

}  // namespace pipetrain::planner
