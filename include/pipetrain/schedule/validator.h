#pragma once

#include <optional>
#include <string>

#include "pipetrain/schedule/schedule.h"

namespace pipetrain::schedule {

struct Violation {
  int stage = 0;
  int step = 0;
  int index = 0;  // position of the instruction within its step
  Instruction instruction;
  std::string reason;

  std::string to_string() const;
};

// How a send completes: kBuffered, at once (the message waits for its receive);
// kSynchronous, when its receive takes the message (MPI's rendezvous for large messages).
enum class SendMode { kBuffered, kSynchronous };

// Executes every stage's steps for one batch, step by step with a barrier between steps;
// sends complete as `sends` says, receives block. Proves that every send meets exactly one matching
// receive in order, nothing deadlocks, every micro-batch runs forward once per virtual
// stage in stage order and (training) backward once in reverse order after its forward,
// loads happen only where inputs or labels are needed, no buffer is overwritten while
// its contents are still needed, and the optimizer step follows every backward.
// Returns the first violation found, or nothing.
std::optional<Violation> validate(const PipelinePlan& plan, SendMode sends = SendMode::kBuffered);

}  // namespace pipetrain::schedule
