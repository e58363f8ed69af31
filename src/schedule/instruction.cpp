#include "pipetrain/schedule/instruction.h"

#include <array>

namespace pipetrain::schedule {
namespace {

constexpr std::array<std::string_view, kNumOpKinds> kNames = {
    "LoadMicroBatch", "ForwardPass",     "BackwardPass",   "BackwardInput",
    "BackwardWeight", "SendActivation",  "RecvActivation", "SendGrad",
    "RecvGrad",       "ReduceTiedGrads", "ReduceGrads",    "OptimizerStep",
};

}  // namespace

std::string_view name(OpKind kind) {
  return kNames[static_cast<int>(kind)];
}

std::optional<OpKind> op_kind_from_name(std::string_view name) {
  for (int i = 0; i < kNumOpKinds; ++i) {
    if (kNames[i] == name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

bool has_buffer(OpKind kind) {
  return kind != OpKind::kReduceTiedGrads && kind != OpKind::kReduceGrads &&
         kind != OpKind::kOptimizerStep;
}

bool is_compute(OpKind kind) {
  return kind == OpKind::kForwardPass || kind == OpKind::kBackwardPass ||
         kind == OpKind::kBackwardInput || kind == OpKind::kBackwardWeight;
}

bool is_send(OpKind kind) {
  return kind == OpKind::kSendActivation || kind == OpKind::kSendGrad;
}

bool is_recv(OpKind kind) {
  return kind == OpKind::kRecvActivation || kind == OpKind::kRecvGrad;
}

}  // namespace pipetrain::schedule
