"""Training steps from an imported model: pipe 2 x data 2 against one process.

Usage: hf_train_step.py PIPETRAIN WORKDIR [ARCH [CONTEXT]]
       (WORKDIR holds ARCH-hf, saved by hf_roundtrip.py; ARCH defaults to llama; CONTEXT,
       when given, is model.context for the fine-tune, another length than the import's)

Imports the transformers model, then trains two SGD steps from it (weight decay, 8 samples
each) twice: on 4 ranks at pipe 2 x data 2 (micro-batches of 2, accumulation 2) and in one
process (accumulation 4). Both steps' losses must agree within 1e-5, every saved weight
within 1e-5 of its tensor's largest value, and the steps must have moved the weights by far
more than that. Exits non-zero otherwise.

Each data-parallel replica draws its samples from a stream of its own, so the two layouts
would see different samples of real text; the token file here repeats one token, which makes
every sample alike (rotary positions still make every attention weight differ). SGD moves
each weight by its gradient, so a gradient summed instead of averaged over the replicas, or
lost between stages, shows (Adam's first step, or clipping, would hide a scale).
"""
import json
import pathlib
import sys

from safetensors.torch import load_file

from hf_roundtrip import run  # beside this file

TOLERANCE = 1e-5


def weights(folder):
    """Every layer tensor of a checkpoint folder, by layer file and name."""
    return {f"{path.name}:{name}": tensor
            for path in sorted(folder.glob("layer_*.safetensors"))
            for name, tensor in load_file(path).items()}


def train_config(imported, tokens, save, stages, accumulation, context, metrics):
    manifest = json.loads((imported / "step_0" / "manifest.json").read_text())
    config = manifest["client_state"]["config"]
    config.pop("train_batch_size", None)  # the import's, resolved for one sample
    if context:
        config["model"]["context"] = context
    config.update({
        "pipeline": {"stages": stages}, "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": accumulation, "train_iters": 2, "steps_per_print": 1,
        "eval_interval": 0, "gradient_clipping": 0.0, "save": str(save),
        "log": {"metrics": str(metrics)},
        "optimizer": {"type": "SGD", "params": {"lr": 0.5, "weight_decay": 0.1}},
        "data": {"type": "tokens", "paths": [str(tokens)]}})
    return config


def losses(metrics):
    return [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]


def main():
    pipetrain, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    arch = sys.argv[3] if len(sys.argv) > 3 else "llama"
    context = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    imported = work / f"{arch}-step-import"
    run(pipetrain, "import", "--hf", work / f"{arch}-hf", "--out", imported)
    tokens = work / "one-token.bin"
    tokens.write_bytes((7).to_bytes(2, "little") * 1000)
    results, loss = {}, {}
    for ranks, stages, accumulation in [(4, 2, 2), (1, 1, 4)]:
        save = work / f"{arch}-step-{ranks}"
        config = work / f"{arch}-step-{ranks}.json"
        metrics = work / f"{arch}-step-{ranks}.jsonl"
        config.write_text(json.dumps(
            train_config(imported, tokens, save, stages, accumulation, context, metrics)))
        run(pipetrain, "launch", "-n", ranks, "--", pipetrain, "train", "--config", config,
                  "--load", imported)
        saved = json.loads((save / "step_2" / "manifest.json").read_text())
        trained_at = saved["client_state"]["config"]["model"]["context"]
        if context and trained_at != context:
            sys.exit(f"{arch}: asked for context {context}, the checkpoint says {trained_at}")
        results[ranks] = weights(save / "step_2")
        loss[ranks] = losses(metrics)

    if len(loss[1]) != 2 or any(abs(a - b) > TOLERANCE for a, b in zip(loss[4], loss[1])):
        sys.exit(f"{arch}: per-step losses differ: pipe 2 x data 2 {loss[4]}, one process {loss[1]}")
    before = weights(imported / "step_0")
    if set(results[4]) != set(results[1]) or set(results[1]) != set(before):
        sys.exit(f"the runs saved different tensors: {sorted(set(results[4]) ^ set(results[1]))}")
    worst, moved = 0.0, 0.0
    for name, want in results[1].items():
        scale = want.abs().max().item()
        worst = max(worst, (results[4][name] - want).abs().max().item() / scale)
        moved = max(moved, (want - before[name]).abs().max().item() / scale)
    at = f" at context {context}" if context else ""
    print(f"{arch}{at}: pipe 2 x data 2 against one process: losses {loss[4]} and {loss[1]}; "
          f"max |difference| / max |weight| = {worst:.2e}; "
          f"the steps moved the weights by up to {moved:.2e}")
    if not worst <= TOLERANCE or not moved > 100 * TOLERANCE:
        sys.exit(f"two steps from the imported {arch} differ between layouts, or did nothing")


if __name__ == "__main__":
    main()
