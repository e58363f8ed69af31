#pragma once

#include <compare>
#include <optional>
#include <vector>

#include "pipetrain/schedule/schedule.h"

namespace pipetrain::schedule {

// One flow of transfers into one chunk of the receiving stage: the unit the engine tags its
// messages by (activations or gradients, for the receiver's chunk).
struct Channel {
  bool gradient = false;
  int receiving_chunk = 0;
  auto operator<=>(const Channel&) const = default;
};

// A lane of payloads from one stage to another for a transport that matches messages by
// their order alone (NCCL's send and receive): every channel between the two (`channel`
// empty), or one channel. The two stages need not be neighbours (interleaving over more
// than two stages has a ring link from the last stage to the first).
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
