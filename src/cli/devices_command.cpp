// `pipetrain devices`: what `device: auto` would find on this machine.
#include <cstdio>

#include "commands.h"
#include "device/cuda.h"

namespace pipetrain::cli {

Command add_devices_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "devices", "Print whether this build has CUDA and the GPUs it sees (rank r takes GPU r % n)");
  return {command, [] {
            const int gpus = device::visible_gpus();
            std::printf("cuda build: %s\nvisible GPUs: %d\n", device::cuda_built() ? "yes" : "no",
                        gpus);
            for (int g = 0; g < gpus; ++g)
              std::printf("  cuda:%d %s (%s)\n", g, device::gpu_name(g).c_str(),
                          device::gpu_identity(g).c_str());
            return 0;
          }};
}

}  // namespace pipetrain::cli
