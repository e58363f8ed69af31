#pragma once

#include <map>
#include <string>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::trainer {

// What an objective's loss saw of a step beyond the loss itself, collected on the ranks that
// compute the loss, for the progress line and the metrics (by TRL's names where TRL has one).
class ObjectiveStatistics {
 public:
  virtual ~ObjectiveStatistics() = default;
  // Forgets what was seen (what evaluation added before a step).
  virtual void clear() = 0;
  // Collective over `ranks`: the step's metrics over every rank (`counts`: whether this
  // rank's figures count; the ranks of a tensor-parallel group compute the same ones); then
  // starts over.
  virtual std::map<std::string, double> take(comm::Communicator& ranks, bool counts) = 0;
};

}  // namespace pipetrain::trainer
