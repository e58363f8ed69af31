"""Greedy generation of transformers' own models against pipetrain's import of them.

Usage: hf_generate.py PIPETRAIN WORKDIR ARCH   (ARCH: one of families.ARCHES)

Creates a tiny random model with transformers (families.py: a vocabulary of 260, so the
prompt's bytes are its token ids; sliding windows of 8, far shorter than the 80 positions),
imports it with `pipetrain import`, and compares
the 64 new token ids of `transformers`' greedy `generate` with `pipetrain generate
--temperature 0 --format jsonl` at pipe 1 and pipe 2, with the KV cache and without.
Exits non-zero on a mismatch.
"""
import json
import pathlib
import sys

import torch
import transformers

from families import tiny_model  # beside this file
from hf_roundtrip import run  # the same command runner

PROMPT = "The licence says"
NEW = 64


def main():
    pipetrain, work, arch = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    # Seed 11, weights ~ N(0, 0.3), no special tokens (so generation never stops early).
    model = tiny_model(arch, positions=96, seed=11, std=0.3, special_tokens=False).eval()
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
