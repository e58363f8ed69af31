#pragma once

#include <string>
#include <vector>

#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// Collective. Gathers every rank's records of one step and, on rank 0, writes
//   PATH                  a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev): a track
//                         per rank, one slice per instruction with stage, micro-batch, bytes
//   PATH.svg              a Gantt chart of what data-parallel column 0 actually ran
//   PATH.predicted.svg    the simulator's timeline of the same schedule with the measured
//                         mean forward and backward time of each stage
// and prints both makespans.
void write_trace(const std::string& path, const engine::PipelineEngine& engine,
                 const std::vector<engine::InstructionRecord>& records);

}  // namespace pipetrain::trainer
