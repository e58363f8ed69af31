#pragma once

#include <array>
#include <chrono>

#include "pipetrain/schedule/instruction.h"

namespace pipetrain::engine {

// Wall-clock seconds spent per instruction kind since the last reset.
class InstructionTimers {
 public:
  void add(schedule::OpKind kind, std::chrono::steady_clock::duration elapsed) {
    seconds_[static_cast<int>(kind)] += std::chrono::duration<double>(elapsed).count();
  }
  double seconds(schedule::OpKind kind) const { return seconds_[static_cast<int>(kind)]; }
  void reset() { seconds_.fill(0.0); }

 private:
  std::array<double, schedule::kNumOpKinds> seconds_{};
};

}  // namespace pipetrain::engine
