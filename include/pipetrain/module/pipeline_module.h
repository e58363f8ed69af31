#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pipetrain/module/layer.h"
#include "pipetrain/module/layer_hooks.h"
#include "pipetrain/module/lora_config.h"
#include "pipetrain/module/partition.h"
#include "pipetrain/module/recompute.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/tensor_parallel/shard.h"

namespace pipetrain::module {

using LossFunction =
    std::function<at::Tensor(const Activation& outputs, const comm::TensorList& labels)>;

struct PipelineModuleOptions {
  int stages = 1;
  int stage_id = 0;
  // Model chunks per stage: the layers split into stages * chunks virtual stages, and
  // this stage owns virtual stages stage_id, stage_id + stages, ... (interleaved 1F1B), or
  // stage_id and 2 * stages - 1 - stage_id in a V (ZBV, DualPipeV).
  int chunks = 1;
  schedule::Placement placement = schedule::Placement::kLoop;
  PartitionMethod partition_method{};  // by parameter counts unless set
  uint64_t seed = 1234;                // base of every layer's initialisation seed
  // Keep only the inputs of each run of this many layers and recompute in backward; 0: off.
  int activation_checkpoint_interval = 0;
  // The parts of layers this stage recomputes in backward (selective recompute).
  RecomputeSet recompute{};
  // Layer types that may be checkpointed; empty: any run of layers with parameters.
  std::vector<std::string> checkpointable_types{};
  // A micro-batch's inputs, for `profile` partitioning.
  Activation profile_sample{};
  // Makes every rank use the same measured costs (e.g. rank 0's); empty: local costs.
  std::function<void(std::vector<double>&)> agree_on_costs{};
  // The loss summed over the labels that count, for a mean over a whole batch's tokens
  // (models::BuiltinModel::token_loss); empty: the model has none.
  LossFunction token_loss{};
  // LoRA: every parameter frozen, adapters added to the chosen linears (module/lora.h).
  LoraConfig lora{};
};

// A model given as an ordered list of layer specs, split over pipeline stages; only this
// stage's layers are built. Layer i is initialised under a seed derived from (seed, i)
// (a tied layer: from its key's first layer), so weights do not depend on partitioning.
class PipelineModule {
 public:
  PipelineModule(std::vector<LayerSpec> specs, LossFunction loss, PipelineModuleOptions options);

  const PipelineModuleOptions& options() const { return options_; }
  int num_layers() const { return static_cast<int>(specs_.size()); }
  const std::vector<LayerSpec>& specs() const { return specs_; }
  // Virtual stage boundaries: virtual stage v owns layers [parts[v], parts[v+1]).
  const Partition& parts() const { return parts_; }
  // This stage's layers of model chunk `chunk`, as [first, last).
  std::pair<int, int> layer_range(int chunk = 0) const;
  // The shape of the stages and chunks (micro-batches left at 1).
  schedule::PipeShape shape() const {
    return {1, options_.stages, options_.chunks, options_.placement};
  }

  // Runs this stage's layers of `chunk` (checkpointed when training with an interval).
  Activation forward(const Activation& input, int chunk = 0);
  at::Tensor loss(const Activation& outputs, const comm::TensorList& labels) const;
  // The options' token_loss (logic_error without one).
  at::Tensor token_loss(const Activation& outputs, const comm::TensorList& labels) const;
  bool has_token_loss() const { return static_cast<bool>(options_.token_loss); }

  void train(bool on);
  // Converts this stage's parameters (in place: tensor handles stay valid) to `dtype`.
  void to(at::ScalarType dtype);
  // Moves every layer's parameters and buffers to `device` (tied layers once).
  void to(at::Device device);
  bool is_training() const { return training_; }

  // This stage's trained parameters, each once, named "<layer index>.<name in its module>";
  // a tied module takes the index of its key's first layer, so owners share names, and on
  // owners after the first stage holding the key only its tied tensors are listed.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  // The frozen ones (a LoRA fine-tune's base), named alike: no gradient, no optimizer state.
  std::vector<std::pair<std::string, at::Tensor>> named_frozen() const;
  // How many linears of this stage have LoRA adapters.
  int adapted_linears() const { return adapted_; }
  // The tensor-parallel shards among this stage's parameters, by the names above, and
  // how each splits (see tensor_parallel::ShardedModule); the rest are replicated.
  std::map<std::string, tensor_parallel::ShardLayout> shard_layouts() const;

  // Tie keys with a module on this stage; the stages that own a key; its tied tensors here.
  std::vector<std::string> tie_keys() const;
  std::vector<int> tie_owner_stages(const std::string& key) const;
  std::vector<at::Tensor> tied_parameters(const std::string& key) const;

  // The layer index in the names of layer `layer`'s parameters (see named_parameters()),
  // or -1 for a layer of this stage without parameters.
  int parameter_layer(int layer) const;
  // Hooks run around every layer's forward from now on (null: none).
  void set_layer_hooks(std::shared_ptr<LayerHooks> hooks) { hooks_ = std::move(hooks); }

 private:
  // Each distinct layer module once (a tied module appears in several layers).
  void for_each_module(const std::function<void(torch::nn::Module&)>& apply);
  struct BuiltLayer {
    int index = 0;
    std::string type;
    std::shared_ptr<torch::nn::Module> module;  // null for functions
    LayerFunction forward;
  };

  void build_owned_layers();
  Activation run_layers(int first, int last, const Activation& input);
  bool checkpointable(int first, int last) const;
  std::vector<at::Tensor> window_parameters(int first, int last) const;
  std::vector<std::pair<std::string, at::Tensor>> named_tensors(bool trained) const;
  int stage_of_layer(int layer) const;

  std::vector<LayerSpec> specs_;
  LossFunction loss_;
  PipelineModuleOptions options_;
  Partition parts_;
  std::map<int, BuiltLayer> layers_;  // by layer index, this stage only
  std::map<std::string, std::shared_ptr<torch::nn::Module>> tied_modules_;
  bool training_ = true;
  int adapted_ = 0;
  std::shared_ptr<LayerHooks> hooks_;
};

// Parameter counts, types and (for `profile`) measured forward+backward seconds of every
// layer, building each one in turn; what partition_layers() needs.
LayerFacts describe_layers(const std::vector<LayerSpec>& specs, uint64_t seed, bool profile,
                           const Activation& sample);

}  // namespace pipetrain::module
