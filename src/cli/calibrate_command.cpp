// `pipetrain calibrate`: this machine as a cluster file for `pipetrain plan`.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/io/atomic_file.h"
#include "pipetrain/trainer/calibration.h"

namespace pipetrain::cli {

Command add_calibrate_command(CLI::App& app) {
  auto out = std::make_shared<std::string>();
  CLI::App* command = app.add_subcommand(
      "calibrate",
      "Measure this machine for `pipetrain plan` (run with one rank per core: pipetrain launch "
      "-n CORES -- pipetrain calibrate --out FILE)");
  command->add_option("--out", *out, "Cluster file to write (JSON)")->required();
  return {command, [out] {
            io::check_output_directory(*out, "--out");
            return comm::run_rank(0, nullptr, [&] {
              const planner::Cluster cluster = trainer::calibrate_machine();
              if (comm::MpiCommunicator::world()->rank() == 0) {
                io::write_file_atomically(*out,
                                          planner::cluster_keys().write(cluster).dump(2) + "\n");
                std::printf("wrote %s\n", out->c_str());
              }
              return 0;
            });
          }};
}

}  // namespace pipetrain::cli
