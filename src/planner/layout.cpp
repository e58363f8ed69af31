#include "pipetrain/planner/layout.h"

namespace pipetrain::planner {

std::string Layout::schedule_label() const {
  switch (schedule) {
    case schedule::Kind::kGpipe:
      return "gpipe";
    case schedule::Kind::kInterleaved:
      return "interleaved x" + std::to_string(chunks);
    case schedule::Kind::kZbH1:
      return "zb-h1";
    default:
      return "1f1b";
  }
}

}  // namespace pipetrain::planner
