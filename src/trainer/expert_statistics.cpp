#include "trainer/expert_statistics.h"

#include <ATen/ATen.h>

#include <cstdio>

#include "module/layer_statistics.h"

namespace pipetrain::trainer {
namespace {

// The order of the figures in the summed vector, tokens per expert after them.
const char* const kFigures[] = {"moe.passes", "moe.load_balancing_loss", "moe.z_loss",
                                "moe.max_load", "moe.dropped_tokens"};
constexpr int64_t kFigureCount = 5;

}  // namespace

ExpertStatistics gather_expert_statistics(const engine::PipelineEngine& engine, int64_t experts,
                                          int64_t all_to_all_bytes) {
  const auto recorded = module::take_statistics();
  at::Tensor sums = at::zeros({kFigureCount + experts + 1}, at::kDouble);
  sums[kFigureCount + experts] = static_cast<double>(all_to_all_bytes);
  for (int64_t i = 0; i < kFigureCount; ++i) {
    const auto it = recorded.find(kFigures[i]);
    if (it != recorded.end()) sums[i] = it->second.cpu().item<double>();
  }
  const auto tokens = recorded.find("moe.tokens_per_expert");
  if (tokens != recorded.end()) sums.narrow(0, kFigureCount, experts).copy_(tokens->second.cpu());
  engine.grid().world_comm()->all_reduce(sums, comm::ReduceOp::kSum);
  sums /= engine.grid().tensor_parallel_size();
  const double* v = sums.data_ptr<double>();
  ExpertStatistics s;
  s.passes = v[0];
  const double per_pass = s.passes > 0 ? 1.0 / s.passes : 0.0;
  s.load_balancing_loss = v[1] * per_pass;
  s.z_loss = v[2] * per_pass;
  s.max_load = v[3] * per_pass;
  s.dropped_tokens = v[4];
  s.tokens_per_expert.assign(v + kFigureCount, v + kFigureCount + experts);
  s.all_to_all_bytes = v[kFigureCount + experts] * engine.grid().tensor_parallel_size();
  return s;
}

std::string ExpertStatistics::summary() const {
  char text[96];
  std::snprintf(text, sizeof text, " load %.2f balance %.3f", max_load, load_balancing_loss);
  std::string out = text;
  if (dropped_tokens > 0) out += " dropped " + std::to_string(static_cast<int64_t>(dropped_tokens));
  return out;
}

nlohmann::json ExpertStatistics::to_json() const {
  return {{"load_balancing_loss", load_balancing_loss},
          {"z_loss", z_loss},
          {"max_load", max_load},
          {"dropped_tokens", dropped_tokens},
          {"tokens_per_expert", tokens_per_expert},
          {"all_to_all_bytes", all_to_all_bytes}};
}

}  // namespace pipetrain::trainer
