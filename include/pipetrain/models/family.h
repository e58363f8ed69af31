#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/models/llama/llama_config.h"

// A model family as one row: its name, what it can do, its keys, its transformers format,
// its costs and its build, all given by the family's own file (src/models/<family>/family.cpp
// for a built-in one, a program's file for its own). Code outside a family asks its row;
// nothing compares family names. No torch here: the build's types are declared only.
namespace pipetrain::models {

struct ModelConfig;
struct BuiltinModel;
struct ModelGroups;
struct LayerCost;
struct HfTensor;
class HfFields;

// Which module a family's layers are built from, and so which part of ModelConfig holds its
// sizes: the GPT (`gpt`), the LLaMA decoder (`llama`, with `moe` when it routes experts),
// the MLP (`mlp`), or a program's own (`params`, read by its build).
enum class Body { kGpt, kDecoder, kMlp, kProgram };

// What a model can do: what code outside models/ asks instead of comparing names.
struct Capabilities {
  bool tensor_parallel = false;   // heads, MLPs and vocabulary split over the tensor group
  bool context_parallel = false;  // sequences split over context_parallel (ring attention)
  // Megatron's sequence parallelism over the tensor group (besides tensor parallelism).
  bool sequence_parallel = false;
  int64_t routed_experts = 0;  // experts of each MoE layer, split over expert_parallel; 0: dense
};

struct FamilyRow {
  std::string name{};  // model.type
  Body body = Body::kProgram;
  // Its MoE settings are ModelConfig::moe and its blocks route tokens to experts.
  bool routes_experts = false;
  // transformers' class and model_type for it (config.json's `architectures[0]` and
  // `model_type`); empty: it has no transformers format.
  std::string hf_architecture{};
  std::string hf_model_type{};

  // What it divides and routes (empty: nothing: one rank computes each of its layers).
  std::function<Capabilities(const ModelConfig&)> capabilities{};
  // Whether its layers split over a tensor group of `t` ranks (heads, vocabulary and MLP
  // dividing by t); only asked for t > 1 of a family that can.
  std::function<bool(const ModelConfig&, int t)> divides{};
  // A decoder family: what it fixes on the LLaMA decoder (Qwen2's q/k/v biases, ...), from
  // the configured one onto `decoder` (the configured one with every family switch off).
  std::function<void(const LlamaConfig& configured, LlamaConfig& decoder)> preset{};
  // Keys only it reads, bound after the condition `model.type <name>` (its body's keys, the
  // special tokens and the experts' are bound for every family with that body). A program's
  // row has them bound when it registers before the first config is read (cli::run).
  std::function<void(config::KeyTable<ModelConfig>&)> keys{};

  // transformers' config.json: its fields read into `config` (the special tokens are read
  // for every family), and `config` written as one.
  std::function<void(const HfFields& fields, const nlohmann::json& hf, ModelConfig& config)>
      from_hf{};
  std::function<nlohmann::json(const ModelConfig&)> to_hf{};
  // Every tensor of the model in layer order, with transformers' names.
  std::function<std::vector<HfTensor>(const ModelConfig&)> tensors{};

  // One LayerCost per layer, in the order its build makes them (no torch): what `pipetrain
  // plan` places and the progress line's MFU counts. Empty: the planner cannot cost it.
  std::function<std::vector<LayerCost>(const ModelConfig&)> costs{};
  // Without `costs`: the planner measures them from `build` on its own process
  // (measured_costs: the real tensors' memory, this machine's times); the progress line then
  // shows no MFU (its FLOPs would be times).
  bool measure_costs = false;
  // This rank's model, over the groups its capabilities allow (others are refused before it
  // is called). InputError naming the key for a bad setting.
  std::function<BuiltinModel(const ModelConfig&, const ModelGroups&)> build{};
};

// The row model.type names: a built-in family's or one a program registered. `find_family`
// returns null for an unknown name; `family` throws logic_error (a name in code, not input).
const FamilyRow* find_family(std::string_view name);
const FamilyRow* family(std::string_view name);

// Every family: the built-in ones in their name order, then the registered ones.
std::vector<const FamilyRow*> families();

// The families `keep` accepts, quoted and joined for a message: "\"gpt\", \"llama\" or ...".
std::string family_list(const std::function<bool(const FamilyRow&)>& keep,
                        const std::string& last_joint = " or ");

// Registers a program's own family before any command runs (cli::run): model.type then
// names it like a built-in one, with its settings under model.params (Body::kProgram), and
// it trains, evaluates, checkpoints, resumes, generates and is planned through the same
// trainer. logic_error for a name already taken or a row without a build.
void register_family(FamilyRow row);

}  // namespace pipetrain::models
