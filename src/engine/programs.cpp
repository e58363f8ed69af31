#include "engine/engine_state.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/schedule_config.h"
#include "pipetrain/schedule/schedule_file.h"
#include "pipetrain/schedule/validator.h"
#include "schedule/pair_order.h"

// The engine's programs: each schedule's plan for this stage, built and validated once per
// shape, and the check that the module fits the pipe it runs on.
namespace pipetrain::engine {
namespace {

using schedule::Instruction;
using schedule::OpKind;

// The first step that holds some chunk's last BackwardPass or BackwardInput (-1: none).
int last_backwards_step(const std::vector<schedule::Step>& steps) {
  std::map<int, int> last;  // per chunk, its step
  for (int t = 0; t < static_cast<int>(steps.size()); ++t) {
    for (const Instruction& in : steps[t]) {
      if (in.kind == OpKind::kBackwardPass || in.kind == OpKind::kBackwardInput) last[in.chunk] = t;
    }
  }
  int first = -1;
  for (const auto& [chunk, t] : last) first = first < 0 ? t : std::min(first, t);
  return first;
}

}  // namespace

// Built and validated once per shape: every stage's plan must be valid with buffered
// sends; sends block (as DeepSpeed's) where the plan also runs with sends that wait for
// their receive, else they are deferred (neighbours that send to each other at once).
PipelineEngine::Impl::Program PipelineEngine::Impl::program(schedule::Kind kind,
                                                            int micro_batches) const {
  const schedule::PipelinePlan plan = plan_of(kind, micro_batches);
  if (const auto violation = schedule::validate(plan)) {
    throw std::logic_error("the " + std::string(schedule::name(kind)) +
                           " schedule is invalid: " + violation->to_string());
  }
  const int stage = grid_->stage_id();
  Program program;
  program.steps = plan.stage_steps[stage];
  program.buffers = plan.num_pipe_buffers[stage];
  program.splits_backward = plan.splits_backward;
  if (schedule::validate(plan, schedule::SendMode::kSynchronous))
    program.sends = SendCompletion::kDeferred;
  program.last_backwards_step = last_backwards_step(program.steps);
  return program;
}

schedule::PipelinePlan PipelineEngine::Impl::plan_of(schedule::Kind kind, int micro_batches) const {
  const schedule::PipeShape shape{micro_batches, shape_.stages, shape_.chunks, shape_.placement};
  schedule::PipelinePlan plan;
  if (kind == schedule::Kind::kFile) {
    const schedule::FileSchedule& file = *config_.pipeline.schedule.file;
    if (file.shape.micro_batches != micro_batches) {
      throw io::InputError(file.path + " schedules " + std::to_string(file.shape.micro_batches) +
                           " micro-batches, but a batch has " + std::to_string(micro_batches) +
                           " (gradient_accumulation_steps)");
    }
    plan = schedule::plan_schedule_file(file, static_cast<int>(config_.pipeline.schedule.max_live));
  } else {
    plan = schedule::plan_pipeline(kind, shape);
  }
  const int max_live = static_cast<int>(config_.pipeline.schedule.max_live);
  for (int s = 0; max_live > 0 && s < shape.stages; ++s) {
    const int live = schedule::peak_live(plan, s);
    if (live > max_live) {
      throw io::InputError("pipeline.schedule \"" + std::string(schedule::name(kind)) +
                           "\" keeps up to " + std::to_string(live) +
                           " micro-batches live on stage " + std::to_string(s) +
                           ", more than pipeline.max_live " + std::to_string(max_live));
    }
  }
  return plan;
}

void PipelineEngine::Impl::check_stage() const {
  const auto& options = module_->options();
  if (options.stages != grid_->pipe_parallel_size() || options.stage_id != grid_->stage_id()) {
    throw io::InputError("the module is built for stage " + std::to_string(options.stage_id) +
                         " of " + std::to_string(options.stages) + ", but this rank is stage " +
                         std::to_string(grid_->stage_id()) + " of " +
                         std::to_string(grid_->pipe_parallel_size()));
  }
  if (options.chunks > 1 && options.stages < 2) {
    throw io::InputError(
        "model chunks need at least 2 pipeline stages (the first and the last "
        "chunk would share a rank and its data), got " +
        std::to_string(options.chunks) + " chunks on 1 stage");
  }
  const schedule::Placement placement =
      options.chunks == 1 ? options.placement : config_.pipeline.schedule.placement();
  if (options.placement != placement) {
    throw io::InputError(std::string("the module places its chunks ") +
                         (options.placement == schedule::Placement::kV ? "in a V" : "in a loop") +
                         ", but pipeline.schedule \"" +
                         std::string(schedule::name(config_.pipeline.schedule.kind)) +
                         "\" runs them the other way");
  }
  // The schedule over the module's chunks (a job checks it when its keys are read; a
  // program of its own builds the module and picks the schedule apart).
  schedule::check_schedule(config_.pipeline.schedule, options.stages, options.chunks);
}

std::vector<schedule::PipeLane> PipelineEngine::Impl::pipe_lanes(
    std::vector<schedule::PipeLane> lanes) const {
  const int first = shape_.stage_of(0);
  if (output_stage() != first) lanes.push_back({output_stage(), first, Channel::feedback()});
  std::sort(lanes.begin(), lanes.end());
  return lanes;
}

}  // namespace pipetrain::engine
