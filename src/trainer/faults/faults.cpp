#include "trainer/faults/faults.h"

#include <csignal>
#include <cstdlib>

#include "pipetrain/checkpoint/checkpoint.h"
#include "trainer/faults/fault_injection.h"

namespace pipetrain::trainer {

void inject_faults_from_environment(engine::PipelineEngine& engine) {
  if (const auto plan = fault_plan_from_environment()) inject_faults(engine, *plan);
  const char* victim = std::getenv("PIPETRAIN_FAULT_KILL_IN_SAVE");
  if (victim && *victim) {
    const int rank = std::atoi(victim);
    checkpoint::set_layer_written_hook([rank](int global_rank) {
      if (global_rank == rank) std::raise(SIGKILL);
    });
  }
}

}  // namespace pipetrain::trainer
