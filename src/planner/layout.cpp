#include "pipetrain/planner/layout.h"

namespace pipetrain::planner {

std::string Layout::schedule_label() const {
  // The config's spellings: "1f1b" for DeepSpeed's train schedule.
  const std::string kind =
      schedule == schedule::Kind::k1F1B ? "1f1b" : std::string(schedule::name(schedule));
  return chunks > 1 ? kind + " x" + std::to_string(chunks) : kind;
}

}  // namespace pipetrain::planner
