#include "trainer/trace.h"

#include <algorithm>
#include <cstdio>

#include "io/atomic_file.h"
#include "pipetrain/schedule/simulator.h"
#include "schedule/measured_costs.h"
#include "schedule/render.h"

namespace pipetrain::trainer {
namespace {

using schedule::OpKind;

nlohmann::json to_json(const std::vector<engine::InstructionRecord>& records) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : records) {
    out.push_back({r.step, static_cast<int>(r.instruction.kind), r.instruction.buffer,
                   r.instruction.micro_batch, r.start_us, r.end_us, r.bytes, r.instruction.chunk});
  }
  return out;
}

}  // namespace

void write_trace(const std::string& path, const engine::PipelineEngine& engine,
                 const std::vector<engine::InstructionRecord>& records) {
  const topology::Grid& grid = engine.grid();
  const nlohmann::json mine = {
      {"rank", grid.global_rank()},
      {"stage", grid.stage_id()},
      {"data", grid.data_parallel_id()},
      // One rank per stage times the schedule: replica 0, model rank 0.
      {"times_stage", grid.replica_id() == 0 && grid.tensor_parallel_id() == 0},
      {"records", to_json(records)}};
  const auto all = comm::all_gather_text(*grid.world_comm(), mine.dump());
  if (grid.global_rank() != 0) return;

  const int stages = grid.pipe_parallel_size();
  nlohmann::json events = nlohmann::json::array();
  schedule::Timeline measured;
  measured.stages.resize(stages);
  const int chunks = engine.module().options().chunks;
  schedule::MeasuredCosts measured_costs(stages, chunks);
  std::size_t instructions = 0;
  for (const auto& text : all) {
    const nlohmann::json rank = nlohmann::json::parse(text);
    const int r = rank["rank"], stage = rank["stage"], data = rank["data"];
    const bool times_stage = rank["times_stage"];
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args",
                       {{"name", "rank " + std::to_string(r) + " (stage " + std::to_string(stage) +
                                     ", data " + std::to_string(data) + ")"}}}});
    for (const auto& e : rank["records"]) {
      const auto kind = static_cast<OpKind>(e[1].get<int>());
      const double start = e[4], end = e[5];
      const int micro_batch = e[3];
      const int chunk = e[7];
      std::string name(schedule::name(kind));
      if (micro_batch >= 0) name += " " + std::to_string(micro_batch);
      events.push_back({{"name", name},
                        {"cat", schedule::name(kind)},
                        {"ph", "X"},
                        {"ts", start},
                        {"dur", end - start},
                        {"pid", 0},
                        {"tid", r},
                        {"args",
                         {{"stage", stage},
                          {"step", e[0]},
                          {"buffer", e[2]},
                          {"micro_batch", micro_batch},
                          {"chunk", chunk},
                          {"bytes", e[6]}}}});
      ++instructions;
      if (!times_stage || !schedule::is_compute(kind)) continue;
      measured.boxes.push_back({stage, kind, micro_batch, chunk, start / 1e3, end / 1e3});
      measured.makespan = std::max(measured.makespan, end / 1e3);
      measured_costs.add(stage, kind, (end - start) / 1e3);
    }
  }
  io::write_file_atomically(
      path, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump());

  // The same step as the simulator sees it, from the measured per-stage costs (ms).
  const schedule::PipelinePlan plan = engine.training_plan();
  const schedule::Timeline predicted = schedule::simulate(plan, measured_costs.costs());
  io::write_file_atomically(path + ".svg", schedule::to_svg(plan, measured, "as run (ms)"));
  io::write_file_atomically(
      path + ".predicted.svg",
      schedule::to_svg(plan, predicted, "simulated from the measured costs (ms)"));
  std::printf(
      "trace: %zu instructions of %zu ranks in %s (+ .svg, .predicted.svg); compute makespan %.1f "
      "ms as run, "
      "%.1f ms simulated\n",
      instructions, all.size(), path.c_str(), measured.makespan, predicted.makespan);
}

}  // namespace pipetrain::trainer
