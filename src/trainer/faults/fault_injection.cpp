#include "trainer/faults/fault_injection.h"
#include "io/rank_record.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>

#include "pipetrain/io/errors.h"

namespace pipetrain::trainer {
namespace {

constexpr std::array<std::pair<std::string_view, FaultAction>, 7> kActions{{
    {"exit", FaultAction::kExit},
    {"abort", FaultAction::kAbort},
    {"kill", FaultAction::kKill},
    {"hang", FaultAction::kHang},
    {"reshape", FaultAction::kReshape},
    {"retype", FaultAction::kRetype},
    {"overflow", FaultAction::kOverflow},
}};

std::optional<FaultAction> action_from_name(std::string_view name) {
  for (const auto& [text, action] : kActions) {
    if (text == name) return action;
  }
  return std::nullopt;
}

std::string_view name_of(FaultAction action) {
  for (const auto& [text, value] : kActions) {
    if (value == action) return text;
  }
  return "?";
}

// Exit, abort, kill or hang, saying so first.
[[noreturn]] void end_process(FaultAction action, const std::string& where) {
  std::fprintf(stderr, "pipetrain: %s: injected fault (%s) at %s\n", comm::rank_identity().c_str(),
               std::string(name_of(action)).c_str(), where.c_str());
  std::fflush(stderr);
  // Let mpirun forward the line from a remote host before this process disappears.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (action == FaultAction::kExit) {
    io::record_exit(3);
    std::_Exit(3);
  }
  // The line above said why: the launcher is told the rank spoke (a status of its own).
  if (action == FaultAction::kAbort) {
    io::record_exit(128 + SIGABRT);
    std::signal(SIGABRT, SIG_DFL);
    std::abort();
  }
  if (action == FaultAction::kKill) {
    io::record_exit(128 + SIGKILL);
    std::raise(SIGKILL);
  }
  while (true) std::this_thread::sleep_for(std::chrono::seconds(60));  // hang
}

}  // namespace

std::optional<FaultPlan> fault_plan_from_environment() {
  const char* text = std::getenv("PIPETRAIN_FAULT");
  if (!text || !*text) return std::nullopt;
  FaultPlan plan;
  bool has_instruction = false;
  bool has_action = false;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const auto equals = item.find('=');
    const std::string key = item.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : item.substr(equals + 1);
    try {
      if (key == "rank") {
        plan.rank = std::stoi(value);
      } else if (key == "step") {
        plan.step = std::stoll(value);
      } else if (key == "instruction") {
        const auto kind = schedule::op_kind_from_name(value);
        if (!kind) throw std::invalid_argument(value);
        plan.instruction = *kind;
        has_instruction = true;
      } else if (key == "action") {
        const auto action = action_from_name(value);
        has_action = action.has_value();
        if (action) plan.action = *action;
      } else {
        throw std::invalid_argument(key);
      }
    } catch (const std::exception&) {
      throw io::InputError(std::string("PIPETRAIN_FAULT: cannot read '") + item + "'");
    }
  }
  if (plan.rank < 0 || plan.step < 1 || !has_instruction || !has_action) {
    throw io::InputError(
        std::string("PIPETRAIN_FAULT must be rank=R,step=S,instruction=KIND,action=") +
        "exit|abort|kill|hang|reshape|retype|overflow, got '" + text + "'");
  }
  if (plan.action == FaultAction::kOverflow &&
      plan.instruction != schedule::OpKind::kBackwardPass &&
      plan.instruction != schedule::OpKind::kBackwardInput) {
    throw io::InputError(
        std::string("PIPETRAIN_FAULT: overflow acts at BackwardPass or ") +
        "BackwardInput (its inf must be in the gradient before it is reduced), got '" + text + "'");
  }
  return plan;
}

FaultInjector::FaultInjector(FaultPlan plan, at::Tensor poisoned)
    : plan_(plan), poisoned_(std::move(poisoned)) {}

void FaultInjector::before(const schedule::Instruction& instruction, int64_t step,
                           const comm::WaitContext& where) {
  if (instruction.kind == plan_.instruction && step == plan_.step) {
    switch (plan_.action) {
      case FaultAction::kReshape:
      case FaultAction::kRetype:
      case FaultAction::kOverflow:
        pending_ = plan_.action;
        break;
      default:
        end_process(plan_.action, where.describe());
    }
  }
  // The inf goes in before a backward pass, which accumulates onto it: the gradient is
  // reduced during backward, so it must be there before any of it travels.
  const bool poison =
      pending_ == FaultAction::kOverflow && (instruction.kind == schedule::OpKind::kBackwardPass ||
                                             instruction.kind == schedule::OpKind::kBackwardInput);
  if (!poison) return;
  pending_.reset();
  if (!poisoned_.defined()) return;
  at::NoGradGuard no_grad;
  if (!poisoned_.grad().defined()) poisoned_.mutable_grad() = at::zeros_like(poisoned_);
  poisoned_.mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
}

comm::TensorList FaultInjector::outgoing(const comm::TensorList& tensors) {
  if (pending_ != FaultAction::kReshape && pending_ != FaultAction::kRetype) return tensors;
  const FaultAction action = *std::exchange(pending_, std::nullopt);
  comm::TensorList broken;
  for (const auto& t : tensors) {
    if (action == FaultAction::kReshape) {
      broken.push_back(t.detach().flatten());
    } else {
      broken.push_back(at::isFloatingType(t.scalar_type()) ? t.detach().to(at::kDouble) : t);
    }
  }
  return broken;
}

void inject_faults(engine::PipelineEngine& engine, const FaultPlan& plan) {
  if (plan.rank != engine.grid().global_rank()) return;
  const auto parameters = engine.module().parameters();
  auto injector =
      std::make_shared<FaultInjector>(plan, parameters.empty() ? at::Tensor() : parameters.front());
  engine.set_hooks(
      {.before =
           [injector](const schedule::Instruction& instruction, int64_t step,
                      const comm::WaitContext& where) {
             injector->before(instruction, step, where);
           },
       .outgoing =
           [injector](const comm::TensorList& tensors) { return injector->outgoing(tensors); }});
}

}  // namespace pipetrain::trainer
