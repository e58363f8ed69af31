#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// What the job's MoE layers recorded in one training step (module/layer_statistics.h).
struct ExpertStatistics {
  double passes = 0;               // MoE layer forwards: layers x micro-batches x replicas
  double load_balancing_loss = 0;  // mean over the passes; 1 when the experts are used evenly
  double z_loss = 0;               // mean over the passes
  double max_load = 0;        // mean over the passes of the busiest expert's tokens / the mean's
  double dropped_tokens = 0;  // expert choices over capacity, summed
  std::vector<double> tokens_per_expert;  // expert choices, summed over layers and replicas
  double all_to_all_bytes = 0;  // rows sent between ranks by expert parallelism, every rank's

  // " load 1.23 balance 1.01" (and " dropped N" when some were) for the progress line.
  std::string summary() const;
  nlohmann::json to_json() const;
};

// Takes what this rank recorded since the last call and sums it over the job with the
// all-to-all bytes this rank sent in the step (collective over every rank; a tensor-parallel
// group's ranks record the same passes, counted once; the bytes are each rank's own, all
// counted).
ExpertStatistics gather_expert_statistics(const engine::PipelineEngine& engine, int64_t experts,
                                          int64_t all_to_all_bytes);

}  // namespace pipetrain::trainer
