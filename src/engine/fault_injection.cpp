#include "pipetrain/engine/fault_injection.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "pipetrain/comm/deadline.h"
#include "pipetrain/errors.h"

namespace pipetrain {

std::optional<FaultPlan> fault_plan_from_environment() {
  const char* text = std::getenv("PIPETRAIN_FAULT");
  if (!text || !*text) return std::nullopt;
  FaultPlan plan;
  bool has_instruction = false;
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
        plan.action = value;
      } else {
        throw std::invalid_argument(key);
      }
    } catch (const std::exception&) {
      throw InputError(std::string("PIPETRAIN_FAULT: cannot read '") + item + "'");
    }
  }
  const bool known = plan.action == "exit" || plan.action == "abort" || plan.action == "kill" ||
                     plan.action == "hang" || plan.action == "reshape" || plan.action == "retype" ||
                     plan.action == "overflow";
  if (plan.rank < 0 || plan.step < 1 || !has_instruction || !known) {
    throw InputError(std::string("PIPETRAIN_FAULT must be rank=R,step=S,instruction=KIND,action=") +
                     "exit|abort|kill|hang|reshape|retype|overflow, got '" + text + "'");
  }
  return plan;
}

void inject_fault(const FaultPlan& plan, const std::string& where) {
  // The engine applies these itself: the next send, or this step's gradients.
  if (plan.action == "reshape" || plan.action == "retype" || plan.action == "overflow") return;
  std::fprintf(stderr, "pipetrain: %s: injected fault (%s) at %s\n", comm::rank_identity().c_str(),
               plan.action.c_str(), where.c_str());
  std::fflush(stderr);
  // Let mpirun forward the line from a remote host before this process disappears.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (plan.action == "exit") std::_Exit(3);
  if (plan.action == "abort") std::abort();
  if (plan.action == "kill") std::raise(SIGKILL);
  while (true) std::this_thread::sleep_for(std::chrono::seconds(60));  // hang
}

}  // namespace pipetrain
