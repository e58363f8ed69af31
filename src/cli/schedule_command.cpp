// `pipetrain schedule`: print one stage's schedule as the contract's JSON, or a grid.
#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "pipetrain/io/errors.h"
#include "schedule/render.h"
#include "shape_options.h"

namespace pipetrain::cli {

Command add_schedule_command(CLI::App& app) {
  struct Options {
    ShapeOptions shape;
    std::optional<int> stage;
    std::string format = "table";
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand("schedule", "Print a pipeline schedule, step by step");
  add_shape_options(*command, options->shape);
  command->add_option("--stage,-s", options->stage,
                      "Stage to print (json: that stage in the contract's form; without it, "
                      "the whole plan, readable again by --kind file --file F.json)");
  command
      ->add_option("--format", options->format,
                   "json (one stage), table, or csv (PyTorch pipelining's compute layout)")
      ->check(CLI::IsMember({"json", "table", "csv"}))
      ->capture_default_str();

  return {command, [options, command] {
            const auto plan = planned(options->shape, *command);
            if (options->stage) schedule::check_stage_id(plan.shape, *options->stage);
            if (options->format == "csv") {
              std::cout << schedule::to_csv(plan);
            } else if (options->format == "json") {
              // One stage: the contract's form; every stage: the plan, readable by --file.
              std::cout << (options->stage ? schedule::to_json(plan, *options->stage)
                                           : schedule::to_plan_json(plan))
                        << '\n';
            } else {
              std::cout << schedule::to_table(plan, options->stage);
            }
            return 0;
          }};
}

}  // namespace pipetrain::cli
