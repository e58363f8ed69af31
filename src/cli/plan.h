#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/planner.h"

// `pipetrain plan`'s work, apart from its printing: the ranked layouts of a config's model
// on a cluster (the command prints them; pipetrain.plan returns them to Python).
namespace pipetrain::cli {

// What `plan` is asked: its command line's options.
struct PlanOptions {
  std::string config;  // the config file (the command reads it)
  std::string cluster;
  int64_t global_batch = 0;
  int top = 5;
  std::optional<int64_t> nodes;  // unset: the cluster file's
  std::string out;
  std::string schedule, checkpointing, recompute = "auto";
  std::string format = "table";
  planner::LayoutLimits limits;
};

// Every layout predicted, sorted (the fitting ones first, by the tie rule), and what for.
struct Plan {
  nlohmann::json config;  // the input config
  planner::Cluster cluster;
  std::unique_ptr<planner::Workload> workload;  // not movable (a cache and its lock)
  std::vector<planner::Candidate> all;
  int fitting = 0;  // at least 1
};

// Checks the options (InputError naming the option) and the config (`plan`'s checks: its
// keys, LoRA on linears the model has), predicts every layout, and refuses in one line when
// none fits the cluster's memory. The config is `config` where given, else o.config's file,
// read after the options are checked.
Plan make_plan(const PlanOptions& o, const std::optional<nlohmann::json>& config = {});

// The step's terms, as `plan` names them and as --format json keys them.
struct TermName {
  const char* said;
  const char* key;
  double planner::StepTerms::*term;
};
const std::vector<TermName>& term_names();

// Selective recompute per stage, as pipeline.recompute takes it: [["mlp"], [], ...].
nlohmann::json recompute_json(const planner::Layout& l);

// A candidate as `--format json` writes it: the layout, the prediction, each stage's memory,
// each group of more than one rank and its transport.
nlohmann::json candidate_json(const planner::Candidate& c);

// The input config with the layout's keys set: ready for `pipetrain train`.
nlohmann::json ready_config(nlohmann::json config, const planner::Layout& l);

}  // namespace pipetrain::cli
