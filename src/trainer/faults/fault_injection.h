#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pipetrain/comm/deadline.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/schedule/instruction.h"

namespace pipetrain::trainer {

// What an injected fault does (see FaultPlan).
enum class FaultAction { kExit, kAbort, kKill, kHang, kReshape, kRetype, kOverflow };

// A fault to inject, from PIPETRAIN_FAULT="rank=R,step=S,instruction=KIND,action=A":
// when global rank R is about to execute instruction KIND (e.g. ForwardPass) during
// training step S (1-based), it
//   exit   prints what it does and exits with code 3
//   abort  prints and calls abort()
//   kill   prints and sends itself SIGKILL
//   hang   prints and sleeps forever (the others' deadlines must fire)
//   reshape  its next send sends the tensors flattened, as a buggy stage would
//   retype   its next send sends floating tensors as float64
//   overflow (at a BackwardPass or BackwardInput) plants an inf in its first parameter's
//            gradient, which backward accumulates onto, as an fp16 overflow would
// Off (and free: no injector is built) when the variable is unset. Only the trainer, and
// tests that build an engine themselves, read the variable: the engine knows none of it.
struct FaultPlan {
  int rank = -1;
  int64_t step = -1;
  schedule::OpKind instruction{};
  FaultAction action{};
};

// Throws InputError naming PIPETRAIN_FAULT if it is set but malformed.
std::optional<FaultPlan> fault_plan_from_environment();

// Carries out a plan on its rank: told of every training instruction before it runs, it
// ends or stops the process there, or breaks the next send (through the engine's outgoing hook), or
// puts an inf into the gradient of `poisoned` before the next optimizer step.
class FaultInjector {
 public:
  FaultInjector(FaultPlan plan, at::Tensor poisoned);

  // `step`: the training step being run (1-based); `where` describes the instruction.
  void before(const schedule::Instruction& instruction, int64_t step,
              const comm::WaitContext& where);
  // `tensors`, or broken as a pending reshape or retype fault asks.
  comm::TensorList outgoing(const comm::TensorList& tensors);

 private:
  FaultPlan plan_;
  at::Tensor poisoned_;
  std::optional<FaultAction> pending_;  // reshape, retype or overflow, until it has acted
};

// Attaches a FaultInjector for `plan` to `engine` through its hooks
// (PipelineEngine::set_hooks) when `plan` names this rank; else nothing. The injector
// poisons the gradient of the module's first parameter.
void inject_faults(engine::PipelineEngine& engine, const FaultPlan& plan);

}  // namespace pipetrain::trainer
