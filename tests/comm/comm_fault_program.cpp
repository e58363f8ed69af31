// A 2x2 job that goes wrong on purpose (see comm_fault_test.sh):
//   silent: rank 0 waits for an activation rank 2 never sends
//   throw:  rank 2 throws while the others wait in a barrier
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/topology/grid.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  return pipetrain::comm::run_rank(argc, argv, [&] {
    using namespace pipetrain;
    topology::Grid grid(topology::pipe_data_parallel_topology(2, 2),
                        comm::MpiCommunicator::world());
    auto& world = *grid.world_comm();
    // Bystanders wait longer, so the rank at fault reports first.
    world.set_timeout(world.timeout() * 3);
    if (mode == "silent" && grid.global_rank() == 0) {
      comm::TensorTransport transport(grid.pipe_comm());
      comm::ScopedWaitContext context("stage 0, step 1, RecvActivation buffer 0, micro-batch 0");
      transport.recv(1, /*tag=*/1);
    }
    if (mode == "throw" && grid.global_rank() == 2) {
      throw std::runtime_error("injected failure in the forward pass");
    }
    world.barrier();
    return 0;
  });
}
