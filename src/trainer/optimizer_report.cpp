#include "trainer/optimizer_report.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

namespace pipetrain::trainer {

std::vector<int64_t> gather_optimizer_state_bytes(engine::PipelineEngine& engine) {
  auto& world = *engine.grid().world_comm();
  const at::Tensor all = world.all_gather(at::tensor({engine.optimizer_state_bytes()}));
  std::vector<int64_t> ranks;
  for (int r = 0; r < world.size(); ++r) ranks.push_back(all[r][0].item<int64_t>());
  return ranks;
}

std::string optimizer_state_summary(const std::vector<int64_t>& ranks) {
  const int64_t most = ranks.empty() ? 0 : *std::max_element(ranks.begin(), ranks.end());
  if (most == 0) return {};
  char text[64];
  std::snprintf(text, sizeof text, " optimizer %.1f MiB/rank",
                static_cast<double>(most) / (1024.0 * 1024.0));
  return text;
}

}  // namespace pipetrain::trainer
