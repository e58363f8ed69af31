// A 2x2 job that goes wrong on purpose (see comm_fault_test.sh):
//   silent: rank 0 waits for an activation rank 2 never sends
//   throw:  rank 2 throws while the others wait in a barrier
// and over NCCL (GPU, emulated hosts; see nccl_fault_test.sh):
//   nccl-silent:     rank 2 never joins an all-reduce the others wait for on the GPU
//   nccl-misshaped:  rank 2 raises on a mis-shaped tensor while the others wait inside an
//                    NCCL all-reduce
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "device/placement.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/device/transport.h"
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
    if (mode.rfind("nccl-", 0) == 0) {
      const at::Device gpu = device::place_rank(device::DeviceKind::kCuda, world);
      auto nccl = device::communicator_for(grid.world_comm(), gpu);
      nccl->set_timeout(grid.pipe_comm()->timeout());  // the bystanders' world waits longer
      at::Tensor t = at::ones({1024}, at::TensorOptions(at::kFloat).device(gpu));
      comm::ScopedWaitContext context("stage 0, step 2, ReduceGrads");
      if (mode == "nccl-silent" && grid.global_rank() == 2) {
        world.barrier();  // the deadline's bystander: gone from NCCL's point of view
      } else if (mode == "nccl-misshaped" && grid.global_rank() == 2) {
        at::Tensor shorter = t.narrow(0, 0, 512).clone();
        if (shorter.numel() != t.numel())
          throw std::runtime_error("a mis-shaped gradient bucket (512 of 1024 elements)");
      } else {
        nccl->all_reduce(t, comm::ReduceOp::kSum);  // stream-ordered: the host goes on
        (void)t.sum().item<float>();                // and blocks here, on the GPU
      }
    }
    if (mode == "throw" && grid.global_rank() == 2) {
      throw std::runtime_error("injected failure in the forward pass");
    }
    world.barrier();
    return 0;
  });
}
