#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/schedule_file.h"

namespace pipetrain::cli {

// --kind, --micro-batches, --stages and --chunks, shared by the schedule commands.
struct ShapeOptions {
  std::string kind = "train";
  schedule::PipeShape shape;
  std::string file;  // --kind file: the CSV of compute orders
};

// pipeline.schedule's spellings, from the schedule registry.
inline std::string schedule_names() {
  std::string names;
  for (const auto& kind : schedule::schedule_kinds()) {
    for (const auto name : kind.config_names)
      names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names;
}

// The chunks per stage each chunked schedule takes, from the schedule registry.
inline std::string chunk_counts() {
  std::string counts;
  for (const auto& kind : schedule::schedule_kinds()) {
    if (!kind.chunked_in_config()) continue;
    const int least = kind.least_config_chunks();
    counts += std::string(counts.empty() ? "" : ", ") + std::string(kind.config_names.front()) +
              " " + std::to_string(least) + (kind.max_chunks == least ? "" : " or more");
  }
  return counts + "; 1 otherwise";
}

inline void add_shape_options(CLI::App& command, ShapeOptions& options) {
  std::string kinds;
  for (const auto& kind : schedule::schedule_kinds()) {
    kinds += "\n  " + std::string(kind.name) + ": " + std::string(kind.summary);
  }
  command.add_option("--kind", options.kind, "Schedule kind:" + kinds)->capture_default_str();
  command.add_option("--micro-batches,-m", options.shape.micro_batches,
                     "Micro-batches per batch (not with --file)");
  command.add_option("--stages,-p", options.shape.stages, "Pipeline stages (not with --file)");
  command.add_option(
      "--file", options.file,
      "With --kind file: each rank's compute order, PyTorch pipelining's CSV layout, or "
      "F.json as `schedule --format json` writes it");
  command
      .add_option("--chunks,-v", options.shape.chunks, "Model chunks per stage: " + chunk_counts())
      ->capture_default_str();
}

// The plan the options name: a built-in kind over --micro-batches and --stages, or a file's.
inline schedule::PipelinePlan planned(const ShapeOptions& options, CLI::App& command) {
  const bool file = options.kind == schedule::name(schedule::Kind::kFile);
  if (file != !options.file.empty()) {
    throw io::InputError(file ? "--kind file needs --file" : "--file needs --kind file");
  }
  if (file) {
    if (command.count("--micro-batches") + command.count("--stages") + command.count("--chunks") >
        0)
      throw io::InputError("--file gives the stages, chunks and micro-batches: drop -m, -p and -v");
    return schedule::plan_schedule_file(schedule::read_schedule_file(options.file));
  }
  if (command.count("--micro-batches") == 0 || command.count("--stages") == 0)
    throw io::InputError("--micro-batches and --stages are required (or --kind file --file)");
  return schedule::plan_pipeline(options.kind, options.shape);
}

}  // namespace pipetrain::cli
