"""An online GRPO loop through the pipeline: pipetrain generates, a rule scores, pipetrain
trains on what it generated, and generates again with the weights it just trained.

  pipetrain launch -n 2 -- python examples/python/grpo_loop.py --iterations 30 --out curve.jsonl

The task (a rule-based reward): a prompt is 1 to 5 "digit" tokens (ids 1..9) and the
separator (id 10); the answer's first token should be the count of digits. A tiny LLaMA starts
from random weights and must learn to count.

Each iteration: 8 prompts x 8 samples each are generated in flight with the KV cache
(temperature 1, each sample its own seed), the generator's log-probability of each drawn
token kept; reward 1 for the right count, else 0; advantages normalised within each
prompt's group (TRL's: (r - mean) / (std + 1e-4)); one policy-gradient step (the config's
objective: TRL's default dapo loss, the generator's log-probabilities as the old policy's).
The trainer recomputes each generated token's log-probability in its forward; the largest
difference from the generator's is `logprobs/largest_gap` of engine.objective_metrics, and
should be rounding (under 1e-5 in fp32). One JSON line per iteration goes to --out.
See docs/user/post-training.md.
"""
import argparse
import json
import random
import time

import torch

import pipetrain

SEPARATOR, DIGITS, VOCAB, CONTEXT = 10, range(1, 10), 16, 16
PROMPTS, GROUP, ANSWER = 8, 8, 2


def make_prompt(rng):
    return [rng.choice(DIGITS) for _ in range(rng.randint(1, 5))] + [SEPARATOR]


def reward(prompt, answer):
    return 1.0 if answer[0] == len(prompt) - 1 else 0.0


def group_advantages(rewards):
    """TRL's GRPO advantages: each reward less its group's mean, over its std (+ 1e-4)."""
    r = torch.tensor(rewards).view(-1, GROUP)
    mean, std = r.mean(1, keepdim=True), r.std(1, keepdim=True)  # Bessel-corrected, as TRL
    return ((r - mean) / (std + 1e-4)).view(-1).tolist()


def micro_batches(sequences, prompts, logprobs, advantages, size):
    """(ids, (labels, advantages, old log-probs, reference log-probs)) per micro-batch: each
    row one rollout padded to the context, position t predicting token t + 1, counted on the
    answer's tokens only."""
    rows = len(sequences)
    ids = torch.zeros(rows, CONTEXT, dtype=torch.long)
    labels = torch.full((rows, CONTEXT), -100, dtype=torch.long)
    adv = torch.zeros(rows, CONTEXT)
    old = torch.full((rows, CONTEXT), float("nan"))
    for i, (sequence, prompt) in enumerate(zip(sequences, prompts)):
        ids[i, :len(sequence)] = torch.tensor(sequence)
        for k, token in enumerate(sequence[len(prompt):]):
            at = len(prompt) - 1 + k  # the position that predicts it
            labels[i, at], adv[i, at], old[i, at] = token, advantages[i], logprobs[i][k]
    ref = torch.zeros(rows, CONTEXT)
    for first in range(0, rows, size):
        part = slice(first, first + size)
        yield ids[part], (labels[part], adv[part], old[part], ref[part])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="one JSON line per iteration")
    args = p.parse_args()

    pipetrain.init_distributed()
    rows, micro = PROMPTS * GROUP, 8
    config = {
        "model": {"type": "llama", "vocab_size": VOCAB, "context": CONTEXT, "d_model": 32,
                  "heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "layers": 2},
        "objective": {"type": "policy_gradient", "loss_type": "dapo", "epsilon": 0.2},
        "train_batch_size": rows, "train_micro_batch_size_per_gpu": micro,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0}},
        "gradient_clipping": 1.0, "pipeline": {"stages": 2}, "seed": args.seed,
    }
    model = pipetrain.pipe.BuiltinModel(model=config.pop("model"))
    engine, _, _, _ = pipetrain.initialize(model=model, config=config)
    rng = random.Random(args.seed)  # the same on every rank
    out = open(args.out, "w") if args.out and engine.global_rank == 0 else None
    for iteration in range(1, args.iterations + 1):
        started = time.perf_counter()
        prompts = [make_prompt(rng) for _ in range(PROMPTS)]
        group = [prompt for prompt in prompts for _ in range(GROUP)]
        seeds = [args.seed * 1_000_003 + iteration * rows + i for i in range(rows)]
        sequences, logprobs = engine.generate(group, ANSWER, temperature=1.0, seed=seeds)
        rewards = [reward(prompt, sequence[len(prompt):])
                   for prompt, sequence in zip(group, sequences)]
        advantages = group_advantages(rewards)
        loss = engine.train_batch(micro_batches(sequences, group, logprobs, advantages, micro))
        metrics = engine.objective_metrics
        record = {"iteration": iteration, "mean_reward": sum(rewards) / rows,
                  "loss": float(loss), "largest_logprob_gap": metrics["logprobs/largest_gap"],
                  "clip_ratio": metrics["clip_ratio"],
                  "seconds": time.perf_counter() - started}
        if engine.global_rank == 0:
            print(f"iteration {iteration} mean reward {record['mean_reward']:.3f} loss "
                  f"{record['loss']:.4f} largest log-prob gap {record['largest_logprob_gap']:.2e}",
                  flush=True)
            if out:
                out.write(json.dumps(record) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
