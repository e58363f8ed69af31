#include "pipetrain/models/llama/decoder_family.h"

#include "models/layer_cost_parts.h"
#include "models/llama/llama.h"
#include "models/llama/llama_hf.h"
#include "pipetrain/models/builtin_model.h"

namespace pipetrain::models {

FamilyRow decoder_family(DecoderFamily spec) {
  FamilyRow row;
  row.name = spec.name;
  row.body = Body::kDecoder;
  row.routes_experts = spec.routes_experts;
  row.hf_architecture = spec.hf_architecture;
  row.hf_model_type = spec.hf_model_type;
  row.preset = spec.preset;
  row.keys = spec.keys;
  // A mixture's router needs a sequence's tokens together: no context or sequence parallelism.
  row.capabilities = [](const ModelConfig& c) -> Capabilities {
    if (routes_experts(c)) return {.tensor_parallel = true, .routed_experts = c.moe.experts};
    return {.tensor_parallel = true, .context_parallel = true, .sequence_parallel = true};
  };
  row.divides = [](const ModelConfig& c, int t) {
    const LlamaConfig& l = c.llama;
    return l.heads % t == 0 && l.num_key_value_heads % t == 0 && l.vocab_size % t == 0 &&
           l.intermediate_size % t == 0;
  };
  row.from_hf = [from_hf = spec.from_hf](const HfFields& f, const nlohmann::json& hf,
                                         ModelConfig& config) {
    config.llama = decoder_sizes_from_hf(f);
    if (from_hf) from_hf(f, hf, config);
    if (config.llama.sliding_window < 0) f.refuse("sliding_window", "must be at least 1");
  };
  row.to_hf = [spec](const ModelConfig& config) {
    const LlamaConfig l = decoder_config(config);
    nlohmann::json hf = decoder_hf_config(l);
    if (spec.check_format) spec.check_format(config);
    if (spec.to_hf) spec.to_hf(config, l, hf);
    return hf;
  };
  const ExpertNames experts{spec.expert_block, spec.expert_gate, spec.expert_down, spec.expert_up};
  row.tensors = [experts, check = spec.check_format](const ModelConfig& config) {
    if (check) check(config);
    return decoder_tensors(decoder_config(config), routes_experts(config) ? &config.moe : nullptr,
                           experts);
  };
  row.costs = [](const ModelConfig& config) {
    return costs::llama_costs(decoder_config(config),
                              routes_experts(config) ? &config.moe : nullptr);
  };
  row.build = [](const ModelConfig& config, const ModelGroups& groups) {
    const LlamaConfig l = decoder_config(config);
    std::optional<MoeConfig> moe;
    if (routes_experts(config)) moe = config.moe;
    return language_model(llama_layers(l, groups.tensor, groups.context, moe, groups.experts),
                          groups, l.vocab_size, l.context);
  };
  return row;
}

}  // namespace pipetrain::models
