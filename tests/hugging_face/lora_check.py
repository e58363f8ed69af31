"""A LoRA fine-tune leaves pipetrain as transformers and peft read it: the adapters exported
with `--format peft` loaded by peft.PeftModel onto the transformers base give pipetrain's
logits, and so does the merged `--format hf` export loaded alone (fp32, 1e-5 relative).
The adapters must have moved the logits away from the base's, so the check can fail.

Usage: lora_check.py PIPETRAIN BASE_FOLDER CHECKPOINT PEFT_FOLDER MERGED_FOLDER WORK
"""
import pathlib
import subprocess
import sys

import peft
import torch
import transformers
from safetensors.torch import load_file

TOLERANCE = 1e-5


def logits_of(model, tokens):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def gap(got, want):
    return (got - want).abs().max().item() / want.abs().max().item()


def main():
    pipetrain, base_folder, checkpoint, peft_folder, merged, work = map(pathlib.Path, sys.argv[1:])
    tokens = [int(t) for t in torch.randint(3, 200, (24,), generator=torch.Generator().manual_seed(5))]
    base = transformers.AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32)
    base_logits = logits_of(base, tokens)
    adapted = peft.PeftModel.from_pretrained(base, peft_folder)
    want = logits_of(adapted, tokens)
    moved = gap(want, base_logits)
    print(f"the adapters move the base's logits by {moved:.2e} (relative)")
    failed = moved < 1e-3
    for ranks in (1, 2):
        out = work / f"lora-logits-{ranks}.safetensors"
        done = subprocess.run([str(pipetrain), "launch", "-n", str(ranks), "--", str(pipetrain),
                               "logits", "--checkpoint", str(checkpoint), "--tokens",
                               ",".join(map(str, tokens)), "--out", str(out)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"logits at {ranks} ranks failed:\n{done.stdout}{done.stderr}")
        error = gap(load_file(out)["logits"], want)
        print(f"pipetrain at pipe {ranks} vs peft on transformers: {error:.2e}")
        failed |= not error <= TOLERANCE
    folded = logits_of(transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32),
                       tokens)
    error = gap(folded, want)
    print(f"merged export in transformers vs peft on transformers: {error:.2e}")
    failed |= not error <= TOLERANCE
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
