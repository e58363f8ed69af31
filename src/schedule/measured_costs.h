#pragma once

#include <vector>

#include "pipetrain/schedule/instruction.h"
#include "pipetrain/schedule/simulator.h"

namespace pipetrain::schedule {

// Measured compute passes, averaged into the simulator's costs: per stage its whole layers
// (every chunk) for one micro-batch; backward counts its weight-gradient part, whether a
// schedule ran BackwardPass, the split BackwardInput + BackwardWeight, or both.
class MeasuredCosts {
 public:
  MeasuredCosts(int stages, int chunks);

  // One executed compute instruction (other kinds are ignored).
  void add(int stage, OpKind kind, double duration);
  CostModel costs() const;

 private:
  double mean(int stage, OpKind kind) const;

  int chunks_;
  std::vector<std::vector<double>> sums_;    // [stage][kind]
  std::vector<std::vector<double>> counts_;  // [stage][kind]
};

}  // namespace pipetrain::schedule
