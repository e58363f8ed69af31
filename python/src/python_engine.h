#pragma once

#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/topology/grid.h"
#include "pipetrain/topology/parallel_layout.h"
#include "python_layer.h"
#include "trainer/generation/sampling.h"
#include "trainer/objectives/objective_statistics.h"

namespace pipetrain::python {

// How pipetrain.pipe.PipelineModule split and built its layers for the engine.
struct ModuleLayout {
  int stages = 1;
  int chunks = 1;
  std::vector<int> parts;  // virtual stage boundaries, as module::Partition
  uint64_t seed = 1234;
  int activation_checkpoint_interval = 0;
  std::vector<std::string> checkpointable_types;
};

// A Python config as the engine reads it: the engine's keys and the layout's (unknown ones
// refused in one line, as the CLI does), batch sizes not yet resolved. The Python door runs
// pipe x data: a layout asking for another axis is refused.
struct PythonConfig {
  engine::TrainingConfig engine;
  topology::ParallelLayout layout{.data = 0};
};
PythonConfig read_config(const nlohmann::json& json);

// The C++ engine behind pipetrain.PipelineEngine: this rank's stage of a model of Python
// layers on the pipe x data grid, running the config's schedule. Every method is collective
// as its engine::PipelineEngine counterpart; an error on any rank ends the job with one line
// (comm::fail_rank), as the CLI does.
class PythonEngine {
 public:
  PythonEngine(const std::vector<PythonLayer>& layers, SharedPy loss_fn, const ModuleLayout& layout,
               const nlohmann::json& config);

  // A built-in family's job, built as `pipetrain train` builds it from the same config (its
  // model section or the checkpoint `load` names, LoRA, every parallel axis, its data),
  // the checkpoint loaded, global batch kept at another data-parallel size.
  explicit PythonEngine(const nlohmann::json& config);

  // DataExhausted becomes Python's StopIteration.
  double train_batch(engine::MicroBatchSource* data);
  std::pair<double, std::vector<module::Activation>> eval_batch(engine::MicroBatchSource* data,
                                                                bool return_outputs);

  // The CLI's token windows (data.type text or tokens), read as `pipetrain train` reads
  // them: sample k of the training stream from (config seed, k), this replica's share.
  void use_token_windows(const std::vector<std::string>& paths, const std::string& type,
                         int token_bytes, int64_t vocab_size, int64_t context,
                         double validation_fraction);
  engine::MicroBatchSource* token_windows(bool validation);

  // The CLI's checkpoint format: client_state beside the config; the token windows'
  // position when they are the data.
  void save_checkpoint(const std::string& directory, const std::string& tag,
                       const nlohmann::json& client_state);
  nlohmann::json load_checkpoint(const std::string& directory, const std::string& tag);

  // For the step metrics: tokens per sample (1 without token data) and a sample's model
  // FLOPs (0 for Python layers, which the planner cannot count); each rank's peak FLOP/s.
  int64_t tokens_per_sample() const { return tokens_per_sample_; }
  double flops_per_sample() const { return flops_per_sample_; }
  double peak_flops() const { return peak_flops_; }

  // A built-in language model's continuations of `prompts` (sample_in_flight with the KV
  // cache, every prompt in flight), each with its new tokens' log-probabilities under the
  // model's softmax at the temperature.
  // `seeds`: one per prompt (its generator's), or none (the options' for all).
  std::pair<std::vector<std::vector<int64_t>>, std::vector<std::vector<double>>> generate(
      const std::vector<std::vector<int64_t>>& prompts, int64_t max_new_tokens,
      const trainer::SamplingOptions& options, const std::vector<uint64_t>& seeds);

  // The metrics of the objective's last training step (trainer::ObjectiveStatistics: DPO's
  // rewards, the policy gradient's largest log-probability gap); empty without one.
  std::map<std::string, double> objective_metrics();

  engine::PipelineEngine& engine() { return *engine_; }
  const topology::Grid& grid() const { return *grid_; }
  const nlohmann::json& effective_config() const { return effective_; }

 private:
  std::shared_ptr<topology::Grid> grid_;
  std::shared_ptr<groups::Communicators> comms_;  // a built-in family's; the engine's own else
  std::shared_ptr<module::PipelineModule> module_;
  std::unique_ptr<engine::PipelineEngine> engine_;
  nlohmann::json effective_;
  std::unique_ptr<engine::MicroBatchSource> train_windows_;
  std::unique_ptr<engine::MicroBatchSource> validation_windows_;
  std::string model_files_;  // the tokenizer's folder, whose files go beside checkpoints
  std::shared_ptr<trainer::ObjectiveStatistics> objective_statistics_;
  std::map<std::string, double> objective_metrics_;  // the last step's
  int64_t context_ = 0;                              // a language model's; 0 else
  int64_t tokens_per_sample_ = 1;
  double flops_per_sample_ = 0;
  double peak_flops_ = 0;
};

}  // namespace pipetrain::python
