// `pipetrain simulate`: validate a schedule, time it under a cost model, draw it.
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "commands.h"
#include "io/atomic_file.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/validator.h"
#include "schedule/render.h"
#include "shape_options.h"

namespace pipetrain::cli {
namespace {

struct SimulateOptions {
  ShapeOptions shape;
  schedule::CostModel costs;
  std::vector<double> weight;  // empty: half of each stage's backward
  std::string svg;
};

void print_report(const SimulateOptions& options, const schedule::PipelinePlan& plan,
                  const schedule::Timeline& timeline) {
  const auto& shape = plan.shape;
  std::printf("schedule %s: %d micro-batches, %d stages, %d chunk(s)\n",
              std::string(schedule::name(plan.kind)).c_str(), shape.micro_batches, shape.stages,
              shape.chunks);
  std::printf("validator: ok\n");
  std::printf("makespan: %.4f\n", timeline.makespan);
  std::printf("%-6s %12s %8s %14s %8s\n", "stage", "busy", "bubble", "peak live acts", "buffers");
  double busy = 0;
  for (int s = 0; s < shape.stages; ++s) {
    const auto& stage = timeline.stages[s];
    busy += stage.busy;
    std::printf("%-6d %12.4f %7.2f%% %14d %8d\n", s, stage.busy, 100 * stage.bubble_fraction,
                stage.peak_live_activations, plan.num_pipe_buffers[s]);
  }
  const double bubble = 1.0 - busy / (shape.stages * timeline.makespan);
  std::printf("bubble: %.2f%% of stage time\n", 100 * bubble);
  const double closed_form =
      static_cast<double>(shape.stages - 1) / (shape.micro_batches + shape.stages - 1);
  std::printf("1F1B/GPipe closed form (p-1)/(m+p-1): %.2f%%\n", 100 * closed_form);
  if (!options.svg.empty()) std::printf("timeline: %s\n", options.svg.c_str());
}

}  // namespace

Command add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate", "Validate a schedule and simulate its timeline: makespan, bubble, memory");
  add_shape_options(*command, options->shape);
  auto& costs = options->costs;
  command->add_option("--forward", costs.forward, "Forward cost per stage (one value or a list)")
      ->delimiter(',')
      ->capture_default_str();
  command->add_option("--backward", costs.backward, "Backward cost per stage, weight-grad included")
      ->delimiter(',')
      ->capture_default_str();
  command
      ->add_option("--weight", options->weight,
                   "Weight-gradient part of the backward per stage (default: half)")
      ->delimiter(',');
  command->add_option("--latency", costs.latency, "Seconds per transfer")->capture_default_str();
  command->add_option("--bandwidth", costs.bandwidth, "Bytes per second (0: free transfers)")
      ->capture_default_str();
  command->add_option("--message-bytes", costs.message_bytes, "Bytes per activation/gradient")
      ->capture_default_str();
  command->add_option("--svg", options->svg, "Write a Gantt chart of the timeline here");

  return {command, [options, command] {
            auto& costs = options->costs;
            costs.weight = options->weight;
            if (costs.weight.empty()) {
              for (double b : costs.backward) costs.weight.push_back(b / 2);
            }
            if (!options->svg.empty()) io::check_output_directory(options->svg, "--svg");
            const auto plan = planned(options->shape, *command);
            costs.check(plan.shape.stages);
            if (const auto violation = schedule::validate(plan)) {
              throw std::logic_error("schedule fails validation: " + violation->to_string());
            }
            const auto timeline = schedule::simulate(plan, costs);
            if (!options->svg.empty()) {
              io::write_file_atomically(options->svg, schedule::to_svg(plan, timeline));
            }
            print_report(*options, plan, timeline);
            return 0;
          }};
}

}  // namespace pipetrain::cli
