#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace pipetrain::schedule {

// What a pipeline stage does in one instruction. The names (see name()) are part of the
// schedule contract (docs/spec/schedules.md) and appear in the JSON form.
enum class OpKind : std::uint8_t {
  kLoadMicroBatch,
  kForwardPass,
  kBackwardPass,    // input and weight gradients together
  kBackwardInput,   // input gradient only (zero-bubble schedules)
  kBackwardWeight,  // the deferred weight gradient of an earlier kBackwardInput
  kSendActivation,
  kRecvActivation,
  kSendGrad,
  kRecvGrad,
  kReduceTiedGrads,
  kReduceGrads,
  kOptimizerStep,
};

inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kOptimizerStep) + 1;

std::string_view name(OpKind kind);
std::optional<OpKind> op_kind_from_name(std::string_view name);

// Instructions that act on a pipe buffer (all but the three end-of-batch reductions).
bool has_buffer(OpKind kind);
bool is_compute(OpKind kind);
bool is_send(OpKind kind);
bool is_recv(OpKind kind);

struct Instruction {
  OpKind kind{};
  // Pipe buffer the instruction reads or writes; -1 when the kind has none.
  int buffer = -1;
  // Model chunk (virtual stage) on this rank; 0 unless the schedule interleaves chunks.
  int chunk = 0;
  // The micro-batch this instruction touches, -1 when it has none. It follows from the
  // buffer discipline; schedules state it so the engine, simulator and validator need
  // not re-derive it (the validator checks that it agrees with the data flow).
  int micro_batch = -1;

  bool operator==(const Instruction&) const = default;
};

// One step: instructions a stage executes in order. A barrier may sit between steps.
using Step = std::vector<Instruction>;

}  // namespace pipetrain::schedule
