"""Two runs of one fine-tune agree: each step both logged (loss, gradient norm, validation
loss) and every tensor of both step_STEPS checkpoints, to 1e-5 relative.

Usage: same_run.py ONE OTHER STEPS (ONE.jsonl and ONE/step_STEPS, the same for OTHER)
"""
import glob
import json
import os
import sys

import safetensors.torch as st


def rows(name):
    return {r["step"]: r for r in map(json.loads, open(f"{name}.jsonl"))}


def main():
    one, other, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a, b = rows(one), rows(other)
    if steps not in a or steps not in b:
        sys.exit(f"step {steps} is missing: {sorted(a)} and {sorted(b)}")
    for step in sorted(set(a) & set(b)):
        for key in ("loss", "grad_norm", "val_loss"):
            if key in a[step] or key in b[step]:
                x, y = a[step][key], b[step][key]
                if not abs(x - y) <= 1e-5 * abs(x):
                    sys.exit(f"step {step} {key}: {x} and {y}")
    files = sorted(os.path.basename(f) for f in glob.glob(f"{one}/step_{steps}/*.safetensors")
                   if not os.path.basename(f).startswith("rng"))
    theirs = sorted(os.path.basename(f) for f in glob.glob(f"{other}/step_{steps}/*.safetensors")
                    if not os.path.basename(f).startswith("rng"))
    if not files or files != theirs:
        sys.exit(f"files differ: {files} and {theirs}")
    for f in files:
        p, q = st.load_file(f"{one}/step_{steps}/{f}"), st.load_file(f"{other}/step_{steps}/{f}")
        if p.keys() != q.keys():
            sys.exit(f"{f}: tensors {sorted(p)} and {sorted(q)}")
        for k in p:
            scale = max(p[k].abs().max().item(), 1e-12) if p[k].numel() else 1.0
            error = (p[k] - q[k]).abs().max().item() / scale if p[k].numel() else 0.0
            if not error <= 1e-5:
                sys.exit(f"{f} {k}: {error:.2e}")
    print(f"{other} = {one}: {len(set(a) & set(b))} steps, {len(files)} files")


if __name__ == "__main__":
    main()
