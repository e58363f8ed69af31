#include "pipetrain/models/builtin_model.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <stdexcept>

#include "models/llama/llama.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::models {
namespace {

// The build functions of the families programs registered, by name.
struct Builders {
  std::mutex mutex;
  std::map<std::string, std::function<BuiltinModel(const nlohmann::json&, const ModelGroups&)>,
           std::less<>>
      families;
};
Builders& builders() {
  static Builders b;
  return b;
}

// A registered family's model, once the groups it cannot split over are refused.
BuiltinModel registered_model(const ModelConfig& config, const ModelGroups& groups) {
  const Capabilities can = capabilities(config);
  const std::string named = "model.type \"" + config.registered + "\"";
  if (groups.tensor.parallel() && !can.tensor_parallel)
    throw io::InputError("model_parallel " + std::to_string(groups.tensor.size()) +
                         " needs a model with tensor-parallel layers, not " + named);
  if (groups.tensor.parallel() && groups.tensor.sequence_parallel && !can.sequence_parallel)
    throw io::InputError("sequence_parallel is not supported by " + named);
  if (groups.context.parallel() && !can.context_parallel)
    throw io::InputError("context_parallel " + std::to_string(groups.context.size()) +
                         " splits sequences for attention, which " + named + " does not");
  if (groups.experts.parallel() && can.routed_experts == 0)
    throw io::InputError("expert_parallel " + std::to_string(groups.experts.size()) +
                         " splits experts, which " + named + " does not route");
  std::function<BuiltinModel(const nlohmann::json&, const ModelGroups&)> build;
  {
    Builders& b = builders();
    const std::lock_guard lock(b.mutex);
    const auto found = b.families.find(config.registered);
    if (found == b.families.end()) throw std::logic_error(named + " has no build function");
    build = found->second;
  }
  return build(config.params, groups);
}

}  // namespace

void register_family(RegisteredFamily family) {
  if (!family.build) throw std::logic_error("model family \"" + family.name + "\" has no build");
  register_family_name(family.name, family.capabilities);
  Builders& b = builders();
  const std::lock_guard lock(b.mutex);
  b.families.emplace(family.name, std::move(family.build));
}

BuiltinModel language_model(std::vector<module::LayerSpec> layers, const ModelGroups& groups,
                            int64_t vocab_size, int64_t context) {
  return {std::move(layers),
          gpt_loss(groups.tensor, groups.context),
          [vocab_size, context](int64_t batch) {
            return module::Activation{at::randint(vocab_size, {batch, context}, at::kLong)};
          },
          TokenInput{vocab_size, context},
          gpt_loss(groups.tensor, groups.context, tensor_parallel::TokenReduction::kSum),
          gpt_loss(groups.tensor, groups.context, tensor_parallel::TokenReduction::kNone)};
}

std::string builtin_types_reading(bool tokens) {
  return tokens ? "\"gpt\" or a LLaMA family (\"llama\", \"mixtral\", \"qwen2\", \"qwen3\", "
                  "\"mistral\")"
                : "\"mlp\"";
}

BuiltinModel make_builtin_model(const ModelConfig& config, const tensor_parallel::Group& group,
                                const context_parallel::Group& context,
                                const expert_parallel::Group& experts) {
  if (config.type == Family::kRegistered)
    return registered_model(config, {group, context, experts});
  if (experts.parallel() && !routes_experts(config)) {
    throw io::InputError("expert_parallel " + std::to_string(experts.size()) +
                         " splits experts: it needs model.type \"mixtral\", not \"" +
                         type_name(config) + "\"");
  }
  if (config.type == Family::kGpt) {
    const GptConfig& g = config.gpt;
    return language_model(gpt_layers(g, group, context), {group, context}, g.vocab_size, g.context);
  }
  if (llama_family(config)) {
    const LlamaConfig l = decoder_config(config);
    std::optional<MoeConfig> moe;
    if (routes_experts(config)) moe = config.moe;
    return language_model(llama_layers(l, group, context, moe, experts), {group, context},
                          l.vocab_size, l.context);
  }
  if (context.parallel()) {
    throw io::InputError("context_parallel " + std::to_string(context.size()) +
                         " splits sequences for attention: it needs model.type \"gpt\" or "
                         "\"llama\", not \"" +
                         type_name(config) + "\"");
  }
  if (group.parallel()) {
    throw io::InputError("model_parallel " + std::to_string(group.size()) +
                         " needs a model with tensor-parallel layers (model.type \"gpt\" or "
                         "\"llama\"), not \"" +
                         type_name(config) + "\"");
  }
  const MlpConfig m = config.mlp;
  return {mlp_layers(m), mlp_loss(m),
          [m](int64_t batch) {
            return module::Activation{at::randn({batch, m.inputs})};
          },
          FeatureInput{m.inputs, m.outputs}};
}

}  // namespace pipetrain::models
