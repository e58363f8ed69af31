// `pipetrain calibrate`: this machine as a cluster file for `pipetrain plan`.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "commands.h"
#include "io/atomic_file.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/io/errors.h"
#include "trainer/calibration/calibration.h"

namespace pipetrain::cli {
namespace {

// A calibration describes one rank per core: more ranks than cores would each measure a
// shared core, and one rank on a machine of several measures no link between ranks.
void check_one_rank_per_core(int ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (ranks > cores || (ranks == 1 && cores > 1)) {
    throw io::InputError("calibrate runs one rank per core: this machine has " +
                         std::to_string(cores) + " cores, the job " + std::to_string(ranks) +
                         " rank(s) (pipetrain launch -n " + std::to_string(cores) +
                         " -- pipetrain calibrate --out FILE)");
  }
}

}  // namespace

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
              check_one_rank_per_core(comm::MpiCommunicator::world()->size());
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
