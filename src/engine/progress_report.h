#pragma once

#include <cstdint>
#include <memory>

#include "pipetrain/engine/timers.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::engine {

// DeepSpeed's progress line, printed by global rank 0 every `steps_per_print` steps:
// "steps: N loss: X iter time (s): T samples/sec: S", with `breakdown` also the
// milliseconds each stage spent per instruction kind since the last line.
class ProgressReport {
 public:
  ProgressReport(std::shared_ptr<const topology::Grid> grid, int64_t steps_per_print,
                 bool breakdown, int64_t batch_size);

  // After training step `step` (1-based) took `seconds`; collective over the pipe when it
  // prints with a breakdown (then `timers` restart).
  void after_step(int64_t step, double loss, double seconds, InstructionTimers& timers);

 private:
  void print(int64_t step, double loss, InstructionTimers& timers) const;

  std::shared_ptr<const topology::Grid> grid_;
  int64_t steps_per_print_;
  bool breakdown_;
  int64_t batch_size_;
  double seconds_ = 0;  // since the last line
};

}  // namespace pipetrain::engine
