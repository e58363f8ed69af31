#include "pipetrain/module/pipeline_module.h"

#include "module/layer_seed.h"
#include "module/lora.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "module/activation_checkpoint.h"
#include "module/rng_state.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::module {
namespace {

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

// Seeds the default generators for one layer's construction and restores the previous
// state afterwards, so building (or not building) layers leaves the global stream alone.
class ScopedLayerSeed {
 public:
  explicit ScopedLayerSeed(uint64_t seed) : saved_(rng_state(at::kCPU)) { at::manual_seed(seed); }
  ~ScopedLayerSeed() { set_rng_state(at::kCPU, saved_); }

 private:
  at::Tensor saved_;
};

// Index of the first layer with each tie key: the layer whose seed the key's module uses.
std::map<std::string, int> first_tied_layers(const std::vector<LayerSpec>& specs) {
  std::map<std::string, int> first;
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
    if (specs[i].tied()) first.emplace(specs[i].tie_key, i);
  }
  return first;
}

Layer build_seeded(const LayerSpec& spec, uint64_t seed) {
  ScopedLayerSeed scoped(seed);
  return spec.build();
}

// A layer of the stage, adapted (frozen, with LoRA adapters where chosen) when `lora` is
// on; the adapters are drawn right after the layer's weights, under its seed.
Layer build_adapted(const LayerSpec& spec, uint64_t seed, const LoraConfig& lora, int& adapted) {
  ScopedLayerSeed scoped(seed);
  Layer layer = spec.build();
  if (lora.enabled() && layer.module) adapted += adapt_layer(*layer.module, lora, spec.block);
  return layer;
}

double seconds_of(const std::function<void()>& run) {
  run();  // warm-up
  constexpr int kRepeats = 3;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRepeats; ++i) run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRepeats;
}

}  // namespace

LayerFacts describe_layers(const std::vector<LayerSpec>& specs, uint64_t seed, bool profile,
                           const Activation& sample) {
  if (profile && sample.empty())
    throw io::InputError("profile partitioning needs a sample micro-batch");
  LayerFacts facts;
  Activation x = sample;
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
    const LayerSpec& spec = specs[i];
    facts.types.push_back(spec.type);
    if (spec.count_parameters && !profile) {
      facts.parameters.push_back(spec.count_parameters());
      continue;
    }
    Layer layer = build_seeded(spec, layer_seed(seed, i));
    facts.parameters.push_back(layer.module ? count_parameters(*layer.module) : 0);
    if (!profile) continue;
    if (spec.tied_forward) {
      layer.forward = [module = layer.module, f = spec.tied_forward](const Activation& x) {
        return f(*module, x);
      };
    }
    Activation input;
    for (const auto& t : x) {
      input.push_back(at::isFloatingType(t.scalar_type()) ? t.detach().requires_grad_(true) : t);
    }
    Activation output;
    facts.profile_costs.push_back(seconds_of([&] {
      output = layer.forward(input);
      at::Tensor total;
      for (const auto& t : output) {
        if (t.requires_grad()) total = total.defined() ? total + t.sum() : t.sum();
      }
      if (total.defined()) total.backward();
    }));
    x.clear();
    for (const auto& t : output) x.push_back(t.detach());
  }
  return facts;
}

PipelineModule::PipelineModule(std::vector<LayerSpec> specs, LossFunction loss,
                               PipelineModuleOptions options)
    : specs_(std::move(specs)), loss_(std::move(loss)), options_(std::move(options)) {
  if (options_.chunks < 1) throw io::InputError("chunks must be at least 1");
  if (options_.stage_id < 0 || options_.stage_id >= options_.stages) {
    throw io::InputError("stage " + std::to_string(options_.stage_id) + " is out of range for " +
                         std::to_string(options_.stages) + " stages");
  }
  if (options_.activation_checkpoint_interval < 0) {
    throw io::InputError("activation_checkpoint_interval must be >= 0");
  }
  const int virtual_stages = options_.stages * options_.chunks;
  const bool profile = partition_needs_profile(options_.partition_method);
  LayerFacts facts;
  if (partition_needs_parameters(options_.partition_method)) {
    facts = describe_layers(specs_, options_.seed, profile, options_.profile_sample);
  } else {
    for (const auto& spec : specs_) facts.types.push_back(spec.type);  // nothing to build
  }
  if (profile && options_.agree_on_costs) options_.agree_on_costs(facts.profile_costs);
  parts_ = partition_layers(options_.partition_method, facts, virtual_stages);
  build_owned_layers();
}

std::pair<int, int> PipelineModule::layer_range(int chunk) const {
  if (chunk < 0 || chunk >= options_.chunks)
    throw std::out_of_range("no model chunk " + std::to_string(chunk));
  const int v = shape().virtual_stage(options_.stage_id, chunk);
  return {parts_[v], parts_[v + 1]};
}

int PipelineModule::stage_of_layer(int layer) const {
  const auto it = std::upper_bound(parts_.begin(), parts_.end(), layer);
  return shape().stage_of(static_cast<int>(it - parts_.begin() - 1));
}

void PipelineModule::build_owned_layers() {
  const auto first_tied = first_tied_layers(specs_);
  std::map<std::string, LayerFunction> tied_own_forward;  // the tied module's own forward
  for (int chunk = 0; chunk < options_.chunks; ++chunk) {
    const auto [first, last] = layer_range(chunk);
    for (int i = first; i < last; ++i) {
      const LayerSpec& spec = specs_[i];
      BuiltLayer built{i, spec.type, nullptr, {}};
      if (!spec.tied()) {
        Layer layer = build_adapted(spec, layer_seed(options_.seed, i), options_.lora, adapted_);
        built.module = std::move(layer.module);
        built.forward = std::move(layer.forward);
        layers_.emplace(i, std::move(built));
        continue;
      }
      // One module per key and stage, seeded like the key's first layer on any stage.
      if (!tied_modules_.count(spec.tie_key)) {
        Layer layer = build_adapted(spec, layer_seed(options_.seed, first_tied.at(spec.tie_key)),
                                    options_.lora, adapted_);
        tied_modules_[spec.tie_key] = layer.module;
        tied_own_forward[spec.tie_key] = layer.forward;
      }
      built.module = tied_modules_.at(spec.tie_key);
      if (spec.tied_forward) {
        built.forward = [module = built.module, f = spec.tied_forward](const Activation& x) {
          return f(*module, x);
        };
      } else {
        built.forward = tied_own_forward.at(spec.tie_key);
      }
      layers_.emplace(i, std::move(built));
    }
  }
  train(training_);
}

bool PipelineModule::checkpointable(int first, int last) const {
  const auto& types = options_.checkpointable_types;
  bool any_parameters = false;
  for (int i = first; i < last; ++i) {
    const BuiltLayer& layer = layers_.at(i);
    if (!types.empty() && std::find(types.begin(), types.end(), layer.type) == types.end())
      return false;
    any_parameters = any_parameters || (layer.module && count_parameters(*layer.module) > 0);
  }
  return !types.empty() || any_parameters;
}

std::vector<at::Tensor> PipelineModule::window_parameters(int first, int last) const {
  std::vector<at::Tensor> params;
  std::vector<const torch::nn::Module*> seen;
  for (int i = first; i < last; ++i) {
    const auto& module = layers_.at(i).module;
    if (!module || std::count(seen.begin(), seen.end(), module.get())) continue;
    seen.push_back(module.get());
    for (const auto& p : module->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
  }
  return params;
}

Activation PipelineModule::run_layers(int first, int last, const Activation& input) {
  Activation x = input;
  for (int i = first; i < last; ++i) {
    if (!hooks_) {
      x = layers_.at(i).forward(x);
      continue;
    }
    hooks_->before_forward(i);
    x = hooks_->after_forward(i, layers_.at(i).forward(x));
  }
  return x;
}

Activation PipelineModule::forward(const Activation& input, int chunk) {
  const auto [first, last] = layer_range(chunk);
  const RecomputeScope recompute(training_ ? options_.recompute : RecomputeSet{});
  const int interval = options_.activation_checkpoint_interval;
  if (interval == 0 || !training_ || !at::GradMode::is_enabled())
    return run_layers(first, last, input);
  Activation x = input;
  for (int start = first; start < last; start += interval) {
    const int end = std::min(start + interval, last);
    if (checkpointable(start, end)) {
      x = checkpointed(
          [this, start, end](const Activation& in) { return run_layers(start, end, in); }, x,
          window_parameters(start, end));
    } else {
      x = run_layers(start, end, x);
    }
  }
  return x;
}

at::Tensor PipelineModule::loss(const Activation& outputs, const comm::TensorList& labels) const {
  if (!loss_) throw std::logic_error("this PipelineModule has no loss function");
  return loss_(outputs, labels);
}

at::Tensor PipelineModule::token_loss(const Activation& outputs,
                                      const comm::TensorList& labels) const {
  if (!options_.token_loss) throw std::logic_error("this PipelineModule has no per-token loss");
  return options_.token_loss(outputs, labels);
}

void PipelineModule::train(bool on) {
  training_ = on;
  for (auto& [index, layer] : layers_) {
    if (layer.module) layer.module->train(on);
  }
}

void PipelineModule::to(at::ScalarType dtype) {
  for_each_module([dtype](torch::nn::Module& module) { module.to(dtype); });
}

void PipelineModule::to(at::Device device) {
  for_each_module([device](torch::nn::Module& module) { module.to(device); });
}

void PipelineModule::for_each_module(const std::function<void(torch::nn::Module&)>& apply) {
  std::vector<torch::nn::Module*> done;
  for (auto& [index, layer] : layers_) {
    if (!layer.module || std::count(done.begin(), done.end(), layer.module.get())) continue;
    done.push_back(layer.module.get());
    apply(*layer.module);
  }
}

std::vector<std::pair<std::string, at::Tensor>> PipelineModule::named_parameters() const {
  return named_tensors(/*trained=*/true);
}

std::vector<std::pair<std::string, at::Tensor>> PipelineModule::named_frozen() const {
  return named_tensors(/*trained=*/false);
}

std::vector<std::pair<std::string, at::Tensor>> PipelineModule::named_tensors(bool trained) const {
  // A tied module is named after its key's first layer on every stage that owns it.
  const auto first_tied = first_tied_layers(specs_);
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::vector<const torch::nn::Module*> seen;
  for (const auto& [index, layer] : layers_) {
    if (!layer.module || std::count(seen.begin(), seen.end(), layer.module.get())) continue;
    seen.push_back(layer.module.get());
    const LayerSpec& spec = specs_[index];
    const int name_index = spec.tied() ? first_tied.at(spec.tie_key) : index;
    // On a later owner stage only the tied tensors are this stage's to train; the rest
    // of the tied module (e.g. position embeddings beside the LM head) is unused there.
    const bool tied_only =
        spec.tied() && tie_owner_stages(spec.tie_key).front() != options_.stage_id;
    const auto& tied_names = specs_[name_index].tied_parameters;
    for (const auto& item : layer.module->named_parameters()) {
      if (tied_only &&
          std::find(tied_names.begin(), tied_names.end(), item.key()) == tied_names.end())
        continue;
      if (item.value().requires_grad() != trained) continue;
      named.emplace_back(std::to_string(name_index) + "." + item.key(), item.value());
    }
  }
  return named;
}

std::map<std::string, tensor_parallel::ShardLayout> PipelineModule::shard_layouts() const {
  const auto first_tied = first_tied_layers(specs_);
  std::map<std::string, tensor_parallel::ShardLayout> layouts;
  for (const auto& [index, layer] : layers_) {
    if (!layer.module) continue;
    const LayerSpec& spec = specs_[index];
    const std::string prefix =
        std::to_string(spec.tied() ? first_tied.at(spec.tie_key) : index) + ".";
    for (const auto& item : layer.module->named_modules()) {
      const auto* sharded = dynamic_cast<const tensor_parallel::ShardedModule*>(item.value().get());
      if (!sharded) continue;
      const std::string path = item.key().empty() ? prefix : prefix + item.key() + ".";
      for (const auto& [name, layout] : sharded->shard_layouts()) layouts[path + name] = layout;
    }
  }
  return layouts;
}

std::vector<at::Tensor> PipelineModule::parameters() const {
  std::vector<at::Tensor> params;
  for (auto& [name, tensor] : named_parameters()) params.push_back(tensor);
  return params;
}

int PipelineModule::parameter_layer(int layer) const {
  const BuiltLayer& built = layers_.at(layer);
  if (!built.module || built.module->parameters().empty()) return -1;
  const LayerSpec& spec = specs_[layer];
  return spec.tied() ? first_tied_layers(specs_).at(spec.tie_key) : layer;
}

std::vector<std::string> PipelineModule::tie_keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, module] : tied_modules_) keys.push_back(key);
  return keys;
}

std::vector<int> PipelineModule::tie_owner_stages(const std::string& key) const {
  std::vector<int> stages;
  for (int i = 0; i < num_layers(); ++i) {
    if (specs_[i].tie_key != key) continue;
    const int stage = stage_of_layer(i);
    if (std::find(stages.begin(), stages.end(), stage) == stages.end()) stages.push_back(stage);
  }
  std::sort(stages.begin(), stages.end());
  return stages;
}

std::vector<at::Tensor> PipelineModule::tied_parameters(const std::string& key) const {
  const auto& module = tied_modules_.at(key);
  const auto first = first_tied_layers(specs_).at(key);
  std::vector<at::Tensor> tensors;
  for (const auto& name : specs_[first].tied_parameters) {
    const auto* found = module->named_parameters().find(name);
    if (!found)
      throw std::invalid_argument("tied parameter '" + name + "' not found in tied module '" + key +
                                  "'");
    if (found->requires_grad()) tensors.push_back(*found);  // frozen: nothing to keep equal
  }
  return tensors;
}

}  // namespace pipetrain::module
