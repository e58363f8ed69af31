#include "trainer/model_flops.h"

#include "pipetrain/io/errors.h"
#include "planner/layer_cost.h"

namespace pipetrain::trainer {

double model_flops_per_sample(const models::ModelConfig& config) {
  if (!config.type->costs) return 0;  // measured costs' FLOPs are this machine's times
  try {
    double flops = 0;
    for (const planner::LayerCost& layer : planner::layer_costs(config))
      flops += layer.forward_flops + layer.backward_flops();
    return flops;
  } catch (const io::InputError&) {
    return 0;  // not a model the planner counts
  }
}

double known_peak_flops(const std::string& gpu_name, bool half_precision) {
  struct Peak {
    const char* name;
    double bf16_tflops;
    double fp32_tflops;
  };
  // clusters/dgx-h100.json, dgx-h200.json, dgx-a100-80gb.json (SXM parts).
  static constexpr Peak kPeaks[] = {{"H100", 989.5, 67}, {"H200", 989.5, 67}, {"A100", 312, 19.5}};
  for (const Peak& peak : kPeaks) {
    if (gpu_name.find(peak.name) != std::string::npos)
      return (half_precision ? peak.bf16_tflops : peak.fp32_tflops) * 1e12;
  }
  return 0;
}

}  // namespace pipetrain::trainer
