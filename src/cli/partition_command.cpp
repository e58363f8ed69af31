// `pipetrain partition`: which layers each stage of a built-in model owns.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "pipetrain/config/config_section.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::cli {

Command add_partition_command(CLI::App& app) {
  struct Options {
    std::string config;
    int stages = 1;
    int chunks = 1;
    std::string method;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command =
      app.add_subcommand("partition", "Show how a config's model splits over pipeline stages");
  command->add_option("--config", options->config, "Config file (JSON)")->required();
  command->add_option("--stages,-p", options->stages, "Pipeline stages")->required();
  command->add_option("--chunks,-v", options->chunks, "Model chunks per stage")
      ->capture_default_str();
  command->add_option("--method", options->method,
                      "Partition method (default: the config's pipeline.partition_method, else "
                      "parameters)");

  return {command, [options] {
            const nlohmann::json json = config::read_json_file(options->config);
            const config::ConfigSection root(json, "");
            std::vector<std::string> unknown;
            const auto config = models::parse_model_config(json, &unknown);
            for (const auto& key : unknown)
              std::cerr << "pipetrain: warning: unknown config key " << key << "\n";
            const module::PartitionMethod method(
                options->method.empty()
                    ? root.section("pipeline").get_string("partition_method", "parameters")
                    : options->method);
            if (options->stages < 1 || options->chunks < 1) {
              throw io::InputError("--stages and --chunks must be at least 1");
            }
            const models::BuiltinModel model = models::make_builtin_model(config);
            const uint64_t seed = static_cast<uint64_t>(root.get_int("seed", 1234));
            const module::LayerFacts facts = module::describe_layers(
                model.layers, seed, module::partition_needs_profile(method), model.sample_input(4));
            const int virtual_stages = options->stages * options->chunks;
            const module::Partition parts = module::partition_layers(method, facts, virtual_stages);

            int64_t total = 0;
            for (auto p : facts.parameters) total += p;
            std::printf("model %s: %zu layers, %lld parameters; partition '%s' over %d stage(s)",
                        models::type_name(config).c_str(), model.layers.size(),
                        static_cast<long long>(total), method.name().c_str(), options->stages);
            if (options->chunks > 1) std::printf(" x %d chunks", options->chunks);
            std::printf("\n");
            for (int v = 0; v < virtual_stages; ++v) {
              int64_t stage_parameters = 0;
              for (int i = parts[v]; i < parts[v + 1]; ++i) stage_parameters += facts.parameters[i];
              std::printf("stage %d", v % options->stages);
              if (options->chunks > 1) std::printf(" chunk %d", v / options->stages);
              std::printf(": layers %d-%d, %lld parameters\n", parts[v], parts[v + 1] - 1,
                          static_cast<long long>(stage_parameters));
              for (int i = parts[v]; i < parts[v + 1]; ++i) {
                const auto& spec = model.layers[i];
                std::printf("  %4d %-14s %12lld", i, spec.type.c_str(),
                            static_cast<long long>(facts.parameters[i]));
                if (spec.tied()) std::printf("  tied '%s'", spec.tie_key.c_str());
                if (!facts.profile_costs.empty())
                  std::printf("  %.3f ms", facts.profile_costs[i] * 1e3);
                std::printf("\n");
              }
            }
            return 0;
          }};
}

}  // namespace pipetrain::cli
