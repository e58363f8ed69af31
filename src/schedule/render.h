#pragma once

#include <optional>
#include <string>

#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/simulator.h"

// Text forms of schedules and timelines.
namespace pipetrain::schedule {

// The contract's JSON object for one stage: {"num_pipe_buffers": N, "steps": [...]}.
// Instructions are [name, buffer] or [name]; schedules with model chunks append the chunk.
std::string to_json(const PipelinePlan& plan, int stage);

// Every stage's schedule as one JSON object, readable as a schedule file:
// {"schedule", "micro_batches", "stages", "chunks", "placement": "loop" or "v",
//  "num_pipe_buffers": [per stage], "steps": [per stage: [per step: [[name, buffer, chunk,
//  micro-batch] or [name], ...]]]}.
std::string to_plan_json(const PipelinePlan& plan);

// PyTorch pipelining's CSV layout of compute orders: one row per rank, one cell per step,
// each a compute action `{virtual stage}{F|B|I|W}{micro-batch}` (I and W: the input and
// weight halves of a split backward), `(F;B)OVERLAP_F_B` for an F&B pair, an empty cell
// where the step computes nothing.
std::string to_csv(const PipelinePlan& plan);
// The CSV's letter of a compute kind (F, B, I, W).
char compute_letter(OpKind kind);

// A step x stage grid, all stages or just `stage`. Cells list the step's instructions
// abbreviated (see the legend printed below the grid) with their buffer.
std::string to_table(const PipelinePlan& plan, std::optional<int> stage);

// A Gantt chart: one row per stage, boxes coloured by pass kind and labelled with the
// micro-batch (and chunk).
// `caption` follows the schedule's name in the title (e.g. "as run (ms)").
std::string to_svg(const PipelinePlan& plan, const Timeline& timeline,
                   std::string_view caption = {});

}  // namespace pipetrain::schedule
