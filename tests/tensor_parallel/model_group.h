#pragma once

#include <memory>

#include "pipetrain/tensor_parallel/group.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::testing {

// This rank's model-parallel group of two in a 1 x (ranks / 2) x 2 grid of the world,
// built once per process (collectively, by the first test that asks).
inline tensor_parallel::Group model_group_of_two() {
  static const auto grid = [] {
    auto world = comm::MpiCommunicator::world();
    return std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(1, world->size() / 2, 2), world);
  }();
  return tensor_parallel::Group{grid->tensor_comm()};
}

}  // namespace pipetrain::testing
