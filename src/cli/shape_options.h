#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "pipetrain/schedule/schedule.h"

namespace pipetrain::cli {

// --kind, --micro-batches, --stages and --chunks, shared by the schedule commands.
struct ShapeOptions {
  std::string kind = "train";
  schedule::PipeShape shape;
};

inline void add_shape_options(CLI::App& command, ShapeOptions& options) {
  std::string kinds;
  for (const auto& kind : schedule::schedule_kinds()) {
    kinds += "\n  " + std::string(kind.name) + ": " + std::string(kind.summary);
  }
  command.add_option("--kind", options.kind, "Schedule kind:" + kinds)->capture_default_str();
  command.add_option("--micro-batches,-m", options.shape.micro_batches, "Micro-batches per batch")
      ->required();
  command.add_option("--stages,-p", options.shape.stages, "Pipeline stages")->required();
  command
      .add_option("--chunks,-v", options.shape.chunks,
                  "Model chunks per stage (interleaved, interleaved-zb, looped-bfs; zbv and "
                  "dualpipev take 2)")
      ->capture_default_str();
}

}  // namespace pipetrain::cli
