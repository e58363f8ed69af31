#include "planner/layer_cost.h"

#include "models/measured_costs.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::planner {

void add_adapters(std::vector<LayerCost>& layers, const models::ModelConfig& config,
                  const module::LoraConfig& lora) {
  if (!lora.enabled()) return;
  const bool decoder = models::llama_family(config);
  int64_t block = 0;
  for (LayerCost& layer : layers) {
    layer.frozen = true;
    if (!decoder || !layer.block) continue;
    const bool dense = layer.expert_parameters == 0;
    if (!lora.adapts_block(block++)) continue;
    const models::LlamaConfig c = models::decoder_config(config);
    const int64_t d = c.d_model, q = c.heads * c.head_width(),
                  kv = c.num_key_value_heads * c.head_width(), ffn = c.intermediate_size;
    // Each adapted linear's A [rank, in] and B [out, rank]; a mixture's experts are not.
    struct Linear {
      const char* name;
      int64_t in_and_out;
      bool mlp;
    };
    for (const Linear& linear :
         {Linear{"q_proj", d + q, false}, Linear{"k_proj", d + kv, false},
          Linear{"v_proj", d + kv, false}, Linear{"o_proj", q + d, false},
          Linear{"gate_proj", d + ffn, true}, Linear{"up_proj", d + ffn, true},
          Linear{"down_proj", ffn + d, true}}) {
      if (lora.targets(linear.name) && (dense || !linear.mlp))
        layer.adapter_parameters += lora.rank * linear.in_and_out;
    }
  }
}

std::vector<LayerCost> layer_costs(const models::ModelConfig& config) {
  if (config.type->costs) return config.type->costs(config);
  if (config.type->measure_costs) return models::measured_costs(config);
  throw io::InputError("plan: model.type \"" + models::type_name(config) +
                       "\" cannot be costed; the planner knows " +
                       models::family_list([](const models::FamilyRow& row) {
                         return static_cast<bool>(row.costs);
                       }) +
                       ", and a program's families that give or measure costs");
}

}  // namespace pipetrain::planner
