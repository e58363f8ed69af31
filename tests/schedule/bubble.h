#pragma once

#include "pipetrain/schedule/simulator.h"

namespace pipetrain::schedule::testing {

// The idle share of all stages' time over the makespan.
inline double bubble(const Timeline& timeline) {
  double busy = 0;
  for (const auto& stage : timeline.stages) busy += stage.busy;
  return 1.0 - busy / (timeline.stages.size() * timeline.makespan);
}

}  // namespace pipetrain::schedule::testing
