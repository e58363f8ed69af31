#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "pipetrain/models/hf_format.h"
#include "pipetrain/models/llama/llama_config.h"
#include "pipetrain/models/moe/moe_config.h"

// The LLaMA decoder in transformers' format, the parts its families share (no torch): the
// sizes and rotation of config.json, the ways families write their windows, and the
// decoder's tensor names. Each family's row (src/models/<family>/family.cpp) adds its own.
namespace pipetrain::models {

// The sizes every decoder family's config.json holds alike (vocabulary, widths, heads,
// blocks, head_dim, rms_norm_eps, tie_word_embeddings; mlp_bias refused).
LlamaConfig decoder_sizes_from_hf(const HfFields& f);
// rope_theta and rope_scaling (transformers 4) or rope_parameters (5) into `l`.
void read_rope(const HfFields& f, LlamaConfig& l);
// One rope section: {rope_type or type, rope_theta, factor, ...}.
void read_rope_section(const HfFields& rope, LlamaConfig& l);
// The SwiGLU MLP's activation, and no soft-capping: what the LLaMA-style families require.
void require_silu_without_capping(const HfFields& f);
// Qwen's windows: layer_types, or use_sliding_window with max_window_layers.
void read_qwen_windows(const HfFields& f, const nlohmann::json& hf, LlamaConfig& l);
// Mistral's window: sliding_window in every block (no attention biases).
void read_mistral_windows(const HfFields& f, LlamaConfig& l);

// The rotation as transformers 5's rope_parameters.
nlohmann::json rope_parameters_of(const LlamaConfig& l);
// The config.json fields every decoder family writes alike (sizes, rotation, norms,
// activation).
nlohmann::json decoder_hf_config(const LlamaConfig& l);
// Whether some blocks attend within a window.
bool has_windows(const LlamaConfig& l);
// The windows as each style of config.json says them: Qwen's (layer_types and
// max_window_layers), Mistral's (sliding_window in every block) or none (refused where set).
void write_qwen_windows(const LlamaConfig& l, nlohmann::json& hf);
void write_mistral_windows(const std::string& family, const LlamaConfig& l, nlohmann::json& hf);
void refuse_windows(const std::string& family, const LlamaConfig& l);

// How a family's transformers class names a routing block's experts: the block (`mlp` or
// Mixtral's `block_sparse_moe`) and expert j's gate, down and up projections.
struct ExpertNames {
  std::string block;
  std::string gate;
  std::string down;
  std::string up;
};
// Every tensor of a decoder with `moe` (or null: dense), in layer order.
std::vector<HfTensor> decoder_tensors(const LlamaConfig& l, const MoeConfig* moe,
                                      const ExpertNames& experts);
// A mixture transformers computes: softmax scores, no shared experts (InputError else).
void check_transformers_router(const MoeConfig& m);

}  // namespace pipetrain::models
