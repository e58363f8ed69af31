#pragma once

#include <compare>
#include <optional>
#include <vector>

#include "pipetrain/schedule/schedule.h"

namespace pipetrain::schedule {

// What a transfer between stages carries: activations go to a later stage, the gradients
// of those activations come back; outside every schedule, the output stage feeds the first
// what it drew for the next round of generation.
enum class Flow { kActivation, kGradient, kFeedback };

// One flow of transfers into one chunk of the receiving stage: the unit a transfer is
// tagged by, so that interleaved chunks cannot take each other's tensors (the one channel
// type of the pipe: the plans' transfers, the engine's sends and receives, the transport's
// lanes).
struct Channel {
  Flow flow = Flow::kActivation;
  int receiving_chunk = 0;  // 0 for feedback

  static Channel activations(int chunk) { return {Flow::kActivation, chunk}; }
  static Channel gradients(int chunk) { return {Flow::kGradient, chunk}; }
  static Channel feedback() { return {Flow::kFeedback, 0}; }
  bool gradient() const { return flow == Flow::kGradient; }
  // The message tag of its transfers, unique per channel and at least 0: feedback 0,
  // activations into chunk c 2c + 1, their gradients 2c + 2.
  int tag() const {
    return flow == Flow::kFeedback ? 0 : 2 * receiving_chunk + (gradient() ? 2 : 1);
  }
  auto operator<=>(const Channel&) const = default;
};

// A lane of payloads from one stage to another for a transport that matches messages by
// their order alone (NCCL's send and receive): every channel between the two (`channel`
// empty), or one channel. The two stages need not be neighbours (interleaving over more
// than two stages has a ring link from the last stage to the first). The same lanes tell
// the transport which communicators to make (device::pipe_links).
struct PipeLane {
  int from = 0;
  int to = 0;
  std::optional<Channel> channel;
  auto operator<=>(const PipeLane&) const = default;
};

// The lanes that carry every transfer of `plans` (run one after another over the same
// lanes) matched by order alone: per ordered pair of stages that exchange messages, one lane
// where every plan's transfers between the two come in the order they are sent, else one
// lane per channel (interleaved, V and zero-bubble schedules send one chunk's transfers
// past another's). Sorted. Nothing when a channel's own transfers come out of order (a plan
// that tagged messages could not carry either).
std::optional<std::vector<PipeLane>> pipe_lanes(const std::vector<PipelinePlan>& plans);

// Whether `lanes` carry every transfer of `plan` in order: each pair's transfers over its
// lane, or each channel's over its own.
bool lanes_carry(const std::vector<PipeLane>& lanes, const PipelinePlan& plan);

}  // namespace pipetrain::schedule
