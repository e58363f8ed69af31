#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/models/gpt/gpt_config.h"
#include "pipetrain/models/layer_cost.h"
#include "pipetrain/models/llama/llama_config.h"
#include "pipetrain/models/moe/moe_config.h"

// The parts the built-in bodies' costs are counted from (src/models/layer_cost.cpp), and
// those bodies' costs (gpt/gpt_costs.cpp, llama/llama_costs.cpp), which their families' rows
// give the planner.
namespace pipetrain::models::costs {

// A [s, in] x [in, out] matrix product: forward, input gradient and weight gradient each
// take 2·s·in·out FLOPs.
void add_linear(LayerCost& layer, double s, double in, double out);
// Attention over s positions with width d (all heads).
void add_attention(LayerCost& layer, double s, double d);
// The token embedding (vocabulary split over the group), plus learnt positions.
LayerCost embedding(const std::string& type, int64_t vocab, int64_t positions, int64_t d, int64_t s,
                    bool tied);
// The LM head and its float32 cross-entropy.
LayerCost head(const std::string& type, int64_t vocab, int64_t d, int64_t s, bool tied,
               int64_t tied_parameters);
// A norm over d features of s positions.
LayerCost norm(const std::string& type, int64_t parameters, int64_t d, int64_t s);

// The GPT's layers, and a LLaMA decoder's (with `moe`: its routing blocks' experts).
std::vector<LayerCost> gpt_costs(const GptConfig& c);
std::vector<LayerCost> llama_costs(const LlamaConfig& c, const MoeConfig* moe = nullptr);

}  // namespace pipetrain::models::costs
