#pragma once

#include <optional>
#include <string>

#include "pipetrain/schedule/instruction.h"

namespace pipetrain {

// A fault to inject, from PIPETRAIN_FAULT="rank=R,step=S,instruction=KIND,action=A":
// when global rank R is about to execute instruction KIND (e.g. ForwardPass) during
// training step S (1-based), it
//   exit   prints what it does and exits with code 3
//   abort  prints and calls abort()
//   kill   prints and sends itself SIGKILL
//   hang   prints and sleeps forever (the others' deadlines must fire)
//   reshape  its next send sends the tensors flattened, as a buggy stage would
//   retype   its next send sends floating tensors as float64
//   overflow (at OptimizerStep) finds an inf in its gradients, as an fp16 overflow would
// Off (and free: one branch per instruction) when the variable is unset.
struct FaultPlan {
  int rank = -1;
  int64_t step = -1;
  schedule::OpKind instruction{};
  std::string action;
};

// Throws InputError naming PIPETRAIN_FAULT if it is set but malformed.
std::optional<FaultPlan> fault_plan_from_environment();

// Acts on `plan` (all actions but reshape end or stop this process); `where` describes the
// instruction for the message.
void inject_fault(const FaultPlan& plan, const std::string& where);

}  // namespace pipetrain
