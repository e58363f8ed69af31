#include "trainer/device_report.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

#include "device/cpu_memory.h"
#include "device/placement.h"

namespace pipetrain::trainer {

std::string describe_devices(const engine::PipelineEngine& engine) {
  const std::string mine =
      device::describe_device(engine.device()) + ", " + engine.communicators().describe();
  const auto all = comm::all_gather_text(*engine.grid().world_comm(), mine);
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; }))
    return all[0] + " on every rank";
  std::string text;
  for (std::size_t r = 0; r < all.size(); ++r)
    text += (r ? "; rank " : "rank ") + std::to_string(r) + " " + all[r];
  return text;
}

bool any_rank_on_gpu(const engine::PipelineEngine& engine) {
  at::Tensor on_gpu = at::tensor({engine.device().is_cuda() ? int64_t{1} : int64_t{0}});
  engine.grid().world_comm()->all_reduce(on_gpu, comm::ReduceOp::kMax);
  return on_gpu.item<int64_t>() != 0;
}

std::vector<device::MemoryUse> gather_memory(const engine::PipelineEngine& engine) {
  auto& world = *engine.grid().world_comm();
  const device::MemoryUse m =
      (engine.device().is_cuda() ? device::gpu_memory(engine.device().index())
                                 : device::cpu_memory())
          .value_or(device::MemoryUse{});
  const at::Tensor all = world.all_gather(at::tensor({m.allocated, m.peak_allocated}));
  std::vector<device::MemoryUse> ranks;
  for (int r = 0; r < world.size(); ++r) {
    ranks.push_back(
        {.allocated = all[r][0].item<int64_t>(), .peak_allocated = all[r][1].item<int64_t>()});
  }
  return ranks;
}

std::string memory_summary(const std::vector<device::MemoryUse>& ranks) {
  if (ranks.empty()) return {};
  int64_t now = 0, peak = 0;
  for (const auto& m : ranks) {
    now = std::max(now, m.allocated);
    peak = std::max(peak, m.peak_allocated);
  }
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char text[64];
  std::snprintf(text, sizeof text, " mem %.2f/%.2f GiB", static_cast<double>(now) / kGiB,
                static_cast<double>(peak) / kGiB);
  return text;
}

}  // namespace pipetrain::trainer
