#include "module/lora.h"

#include "pipetrain/tensor_parallel/layers.h"

namespace pipetrain::module {

int adapt_layer(torch::nn::Module& layer, const LoraConfig& config, int64_t block) {
  for (auto& parameter : layer.parameters()) parameter.requires_grad_(false);
  if (!config.adapts_block(block)) return 0;
  int adapted = 0;
  for (const auto& item : layer.named_modules()) {
    const std::string& path = item.key();
    if (!config.targets(path.substr(path.rfind('.') + 1))) continue;
    torch::nn::Module& module = *item.value();
    if (auto* column = dynamic_cast<tensor_parallel::ColumnParallelLinearImpl*>(&module)) {
      column->add_lora(lora_options(config));
    } else if (auto* row = dynamic_cast<tensor_parallel::RowParallelLinearImpl*>(&module)) {
      row->add_lora(lora_options(config));
    } else {
      continue;
    }
    ++adapted;
  }
  return adapted;
}

}  // namespace pipetrain::module
