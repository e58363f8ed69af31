"""Logits of transformers' own models against pipetrain's import of them, and back.

Usage: hf_roundtrip.py PIPETRAIN WORKDIR ARCH   (ARCH: one of families.ARCHES)

Creates a tiny random model with transformers (families.py), saves it (safetensors; the LLaMA in two
and the Mixtral in several shards), imports it with `pipetrain import`, computes
`pipetrain logits` at pipe 1, pipe 2 and model 2 (the Mixtral also with its experts split
over 2 ranks, at pipe 1 and 2) and compares them with transformers' logits (fp32, 1e-5
relative to the largest logit) on 20 tokens, past every sliding window; then exports the checkpoint with `pipetrain export --format hf`, loads the folder
with AutoModelForCausalLM.from_pretrained and compares again. Exits non-zero on a mismatch.
"""
import pathlib
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file

from families import tiny_model  # beside this file

TOLERANCE = 1e-5


def reference_logits(model, tokens):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def run(*command):
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, command))} failed ({done.returncode}):\n"
                 f"{done.stdout}{done.stderr}")
    return done.stdout


def compare(what, got, want):
    error = (got - want).abs().max().item() / want.abs().max().item()
    print(f"{what}: max |difference| / max |logit| = {error:.2e}")
    if got.shape != want.shape or not error <= TOLERANCE:
        sys.exit(f"{what}: logits differ ({tuple(got.shape)} vs {tuple(want.shape)}, {error:.2e})")


def main():
    pipetrain, work, arch = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    model = tiny_model(arch)
    hf_folder = work / f"{arch}-hf"
    shard = "100MB" if arch.startswith("gpt2") else "2KB"
    model.save_pretrained(hf_folder, safe_serialization=True, max_shard_size=shard)
    tokens = [int(t) for t in torch.randint(0, 260, (20,), generator=torch.Generator().manual_seed(3))]
    want = reference_logits(model, tokens)

    checkpoint = work / f"{arch}-ckpt"
    run(pipetrain, "import", "--hf", hf_folder, "--out", checkpoint)
    ids = ",".join(map(str, tokens))
    # (ranks, model, expert): the Mixtral's experts also split over 2 ranks, at pipe 1 and 2.
    layouts = [(1, 1, 1), (2, 1, 1), (2, 2, 1)]
    if arch in ("mixtral", "qwen3-moe"):
        layouts += [(2, 1, 2), (4, 1, 2)]
    for ranks, parallel, experts in layouts:
        out = work / f"{arch}-logits-{ranks}-{parallel}-{experts}.safetensors"
        run(pipetrain, "launch", "-n", ranks, "--", pipetrain, "logits", "--checkpoint",
            checkpoint, "--tokens", ids, "--model", parallel, "--expert-parallel", experts,
            "--out", out)
        layout = f"pipe {ranks // (parallel * experts)} model {parallel} expert {experts}"
        compare(f"{arch} {layout}", load_file(out)["logits"], want)

    exported = work / f"{arch}-exported"
    run(pipetrain, "export", "--format", "hf", "--checkpoint", checkpoint, "--out", exported)
    back = transformers.AutoModelForCausalLM.from_pretrained(exported)
    if type(back) is not type(model):
        sys.exit(f"exported folder loads as {type(back).__name__}, not {type(model).__name__}")
    compare(f"{arch} exported, loaded by transformers", reference_logits(back, tokens), want)


if __name__ == "__main__":
    main()
