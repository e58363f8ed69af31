#include "engine/progress_report.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <string>
#include <vector>

namespace pipetrain::engine {

using schedule::OpKind;

ProgressReport::ProgressReport(std::shared_ptr<const topology::Grid> grid, int64_t steps_per_print,
                               bool breakdown, int64_t batch_size)
    : grid_(std::move(grid)),
      steps_per_print_(steps_per_print),
      breakdown_(breakdown),
      batch_size_(batch_size) {}

void ProgressReport::after_step(int64_t step, double loss, double seconds,
                                InstructionTimers& timers) {
  seconds_ += seconds;
  if (step % steps_per_print_ != 0) return;
  print(step, loss, timers);
  seconds_ = 0;
}

void ProgressReport::print(int64_t step, double loss, InstructionTimers& timers) const {
  at::Tensor gathered;  // [stage, kind] seconds
  if (breakdown_) {
    std::vector<double> seconds;
    for (int k = 0; k < schedule::kNumOpKinds; ++k)
      seconds.push_back(timers.seconds(static_cast<OpKind>(k)));
    timers.reset();
    gathered = grid_->pipe_comm()->all_gather(at::tensor(seconds, at::kDouble));
  }
  if (grid_->global_rank() != 0) return;
  const double iteration = seconds_ / steps_per_print_;
  std::printf("steps: %lld loss: %.4f iter time (s): %.4f samples/sec: %.3f\n",
              static_cast<long long>(step), loss, iteration, batch_size_ / iteration);
  if (breakdown_) {
    std::printf("  time per stage (ms):");
    for (int k = 0; k < schedule::kNumOpKinds; ++k) {
      if (gathered.select(1, k).sum().item<double>() == 0) continue;
      std::printf(" %s", std::string(schedule::name(static_cast<OpKind>(k))).c_str());
      for (int s = 0; s < gathered.size(0); ++s)
        std::printf(" %.1f", gathered[s][k].item<double>() * 1e3);
      std::printf(";");
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace pipetrain::engine
