"""Tiny random models of every family pipetrain imports, made by transformers (no download).

tiny_model(ARCH, ...) returns a transformers model whose every parameter is
random (transformers starts norms at 1 and biases at 0, which would let a mix-up of norm
weights or of same-shaped biases pass unseen). ARCH is one of ARCHES.
"""
import torch
import transformers

VOCAB = 260

# The LLaMA-shaped decoders: (transformers config class, model class, extra config).
DECODERS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
    "llama-tied": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                   {"tie_word_embeddings": True}),
    # LLaMA 3.1's rotation: low frequencies divided by 8 past an 8-position pretraining.
    "llama3": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
               {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8}}),
    "llama-linear": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                     {"rope_parameters": {"rope_type": "linear", "rope_theta": 500.0,
                                          "factor": 2.0}}),
    "llama-yarn": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                   {"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 3.0,
                                        "original_max_position_embeddings": 8}}),
    # Dynamic NTK grows the base past max_position_embeddings (12 here: the test's 20 tokens
    # run past it).
    "llama-dynamic": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                      {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 500.0,
                                           "factor": 2.0}, "max_position_embeddings": 12}),
    # Qwen2.5: q/k/v biases, tied embeddings (the small sizes), windows past block 1.
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              {"tie_word_embeddings": True, "use_sliding_window": True, "sliding_window": 8,
               "max_window_layers": 1}),
    # Qwen3: q/k norms per head, a head_dim of its own (16, not 32 / 4).
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, {"head_dim": 16}),
    # Mistral: every block attends within the last 8 positions.
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                {"sliding_window": 8}),
    # Gemma 3: embeddings scaled by sqrt(d), (1 + w) norms before and after attention and
    # the MLP, q/k norms, GELU (tanh), blocks 0 and 2 sliding (window 8, their own rotary
    # base), block 1 global (linear scaling), scores scaled by 12^-1/2, logits capped at 5.
    "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM,
               {"head_dim": 16, "query_pre_attn_scalar": 12, "sliding_window": 8,
                "sliding_window_pattern": 2, "final_logit_softcapping": 5.0,
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}}),
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM,
                {"num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 40}),
    # Qwen3-MoE: Qwen3's attention, 4 experts of width 24 (top 2, scores not renormalised),
    # block 1 dense.
    "qwen3-moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM,
                  {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 24, "norm_topk_prob": False,
                   "mlp_only_layers": [1], "decoder_sparse_step": 1}),
}
ARCHES = ["gpt2", "gpt2-untied", *DECODERS]


def randomized(model, std=0.2):
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
    return model


def tiny_model(arch, positions=24, seed=7, std=0.2, special_tokens=True):
    """special_tokens=False: no bos, eos or pad token (transformers' defaults otherwise)."""
    torch.manual_seed(seed)
    if arch.startswith("gpt2"):
        config = transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=positions, n_embd=32, n_layer=3, n_head=4,
            activation_function="gelu_new", tie_word_embeddings=(arch == "gpt2"),
            bos_token_id=None, eos_token_id=None)
        return randomized(transformers.GPT2LMHeadModel(config), std)
    config_class, model_class, extra = DECODERS[arch]
    settings = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 88,
                "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                "max_position_embeddings": positions, "rms_norm_eps": 1e-5,
                "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}
    if not special_tokens:
        settings.update({"bos_token_id": None, "eos_token_id": None, "pad_token_id": None})
    settings.update(extra)
    return randomized(model_class(config_class(**settings)), std)
