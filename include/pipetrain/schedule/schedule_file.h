#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipetrain/schedule/compute_order.h"
#include "pipetrain/schedule/schedule.h"

// Schedules read from a file: each rank's compute order in the CSV layout of PyTorch's
// pipelining tests, lowered (transfers and buffers added), validated and simulated like
// the built-in kinds.
namespace pipetrain::schedule {

struct FileSchedule {
  std::string path;
  // Stages are the rows; chunks, their placement (loop or V) and the micro-batches follow
  // from the stage indices and micro-batches the cells name.
  PipeShape shape;
  std::vector<ComputeOrder> orders;  // per rank
};

// One row per rank; each cell is empty (an idle slot) or a compute action
// `{stage}{F|B|I|W}{micro-batch}` with the global (virtual) stage index, or PyTorch's
// overlapped pair `({stage}F{mb};{stage}B{mb})OVERLAP_F_B`, run forward first. Throws
// InputError "PATH: rank R, cell C (`text`): why" for malformed cells and for ranks whose
// stages neither loop (r, r+P, ...) nor form a V (r, 2P-1-r).
FileSchedule parse_schedule_csv(std::string_view text, const std::string& path);

// pipetrain's whole-plan JSON (render.h's to_plan_json): the shape from its fields, each
// rank's compute order from its steps' compute instructions (the transfers and buffers in
// it are made again). InputError naming the file and the field for anything malformed.
FileSchedule parse_schedule_json(std::string_view text, const std::string& path);

// A `.json` file as pipetrain's JSON, anything else as the CSV.
FileSchedule read_schedule_file(const std::string& path);

// Lowers the file's orders into a plan and proves it before any rank starts: every
// micro-batch runs forward and then backward once on every stage (a weight gradient only
// after its input gradient), nothing waits in a cycle, no rank holds more than `max_live`
// micro-batches' activations (0: no bound), and the lowered plan validates. Throws
// InputError "PATH: rank R, action A: why" (for a cycle: who waits for whom).
PipelinePlan plan_schedule_file(const FileSchedule& file, int max_live = 0);

}  // namespace pipetrain::schedule
