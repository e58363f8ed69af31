#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// Every rank's optimizer-state bytes (moments, momentum and fp32 masters held beside the
// model; see PipelineEngine::optimizer_state_bytes), in rank order. Collective over the
// grid's world.
std::vector<int64_t> gather_optimizer_state_bytes(engine::PipelineEngine& engine);

// For the progress line: " optimizer X MiB/rank", the most any rank holds; empty while no
// rank holds state yet.
std::string optimizer_state_summary(const std::vector<int64_t>& ranks);

}  // namespace pipetrain::trainer
