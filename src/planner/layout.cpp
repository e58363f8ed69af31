#include "planner/layout.h"

namespace pipetrain::planner {

std::string Layout::schedule_label() const {
  const std::string kind(schedule::config_name(schedule));
  return parallel.chunks > 1 ? kind + " x" + std::to_string(parallel.chunks) : kind;
}

}  // namespace pipetrain::planner
