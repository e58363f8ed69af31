"""Greedy generation of transformers' own models against pipetrain's import of them.

Usage: hf_generate.py PIPETRAIN WORKDIR ARCH   (ARCH: gpt2, llama)

Creates a tiny random GPT-2 or grouped-query LLaMA with transformers (a vocabulary of 260,
so the prompt's bytes are its token ids), imports it with `pipetrain import`, and compares
the 64 new token ids of `transformers`' greedy `generate` with `pipetrain generate
--temperature 0 --format jsonl` at pipe 1 and pipe 2, with the KV cache and without.
Exits non-zero on a mismatch.
"""
import json
import pathlib
import sys

import torch
import transformers

from hf_roundtrip import run  # the same command runner

PROMPT = "The licence says"
NEW = 64


def tiny_model(arch):
    torch.manual_seed(11)
    if arch == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=260, n_positions=96, n_embd=32, n_layer=3, n_head=4,
            activation_function="gelu_new", bos_token_id=None, eos_token_id=None)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=260, hidden_size=32, intermediate_size=88, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
            rope_theta=500.0, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None,
            pad_token_id=None)
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # every parameter random (norms start at 1, biases at 0)
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def main():
    pipetrain, work, arch = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    model = tiny_model(arch)
    folder = work / f"{arch}-generate-hf"
    model.save_pretrained(folder, safe_serialization=True)
    prompt = list(PROMPT.encode())
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)),
                             max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                             pad_token_id=0)
    want = out[0, len(prompt):].tolist()
    checkpoint = work / f"{arch}-generate-ckpt"
    run(pipetrain, "import", "--hf", folder, "--out", checkpoint)
    for ranks in (1, 2):
        for cache in ([], ["--no-kv-cache"]):
            line = run(pipetrain, "launch", "-n", ranks, "--", pipetrain, "generate",
                       "--checkpoint", checkpoint, "--prompt", PROMPT, "--tokens", NEW,
                       "--temperature", 0, "--format", "jsonl", *cache)
            got = json.loads(line.splitlines()[0])["tokens"]
            what = f"{arch} pipe {ranks} {'without' if cache else 'with'} the KV cache"
            same = sum(1 for a, b in zip(got, want) if a == b)
            print(f"{what}: {same} of {NEW} new tokens as transformers' generate")
            if got != want:
                sys.exit(f"{what}: {got} != transformers' {want}")


if __name__ == "__main__":
    main()
