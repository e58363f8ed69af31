"""Policy-gradient steps against TRL 1.16's GRPOTrainer loss on fixed rollouts.

  grpo_check.py make MODEL PREFIX ROLLOUTS.safetensors
      Nine rollouts for chat_fixture.py's model: a 6-token prompt and a completion of 2 to 10
      tokens each, as prepared examples (PREFIX, the mask marking the completion), and beside
      them (ROLLOUTS: offsets, per-example advantages, per-token old and reference
      log-probabilities: the model's own moved by up to 0.3 and 0.5, so ratios clip).
  grpo_check.py trl MODEL PREFIX ROLLOUTS OUT LOSS_TYPE
      TRL's GRPOTrainer._compute_loss on the first 8 rollouts as one batch (beta 0.04, epsilon
      0.2, epsilon_high 0.28, max_completion_length 16, fp32 on the CPU, no generation), its
      backward, and one SGD step at lr 0.5 by hand: OUT/loss.json, OUT/weights.pt.
  grpo_check.py compare OUT MODEL METRICS.jsonl EXPORTED
      pipetrain's first step against it: the loss within 1e-5 relative, each weight's update
      within 1e-5 of the largest.
"""
import json
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from chat_masks import read_examples  # noqa: E402

LR, BETA, EPSILON, EPSILON_HIGH, MAX_COMPLETION = 0.5, 0.04, 0.2, 0.28, 16
PROMPT, ROLLOUTS, TRAINED = 6, 9, 8


def model_logprobs(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return [0.0] + logits.log_softmax(-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def make(model_dir, prefix, rollouts):
    import transformers
    from prepare_data import write_indexed
    from safetensors.torch import save_file
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    vocab = model.config.vocab_size
    rng = random.Random(13)
    sequences, masks, advantages, old, ref, offsets = [], bytearray(), [], [], [], [0]
    for i in range(ROLLOUTS):
        completion = rng.randint(2, 10)
        ids = [rng.randrange(3, vocab) for _ in range(PROMPT + completion)]
        mask = [0] * PROMPT + [1] * completion
        sequences.append(ids)
        masks += bytes(mask)
        own = model_logprobs(model, ids)
        old += [lp + rng.uniform(-0.3, 0.3) if m else 0.0 for lp, m in zip(own, mask)]
        ref += [lp + rng.uniform(-0.5, 0.5) if m else 0.0 for lp, m in zip(own, mask)]
        advantages.append(rng.gauss(0, 1))
        offsets.append(offsets[-1] + len(ids))
    write_indexed(prefix, sequences, vocab, bytes(masks))
    save_file({"offsets": torch.tensor(offsets), "advantages": torch.tensor(advantages),
               "old_logprobs": torch.tensor(old), "ref_logprobs": torch.tensor(ref)}, rollouts)


def run_trl(model_dir, prefix, rollouts, out, loss_type):
    import datasets
    import transformers
    import trl
    from safetensors.torch import load_file
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = trl.GRPOConfig(
        output_dir=os.path.join(out, "trl"), per_device_train_batch_size=TRAINED,
        num_generations=TRAINED, max_completion_length=MAX_COMPLETION, loss_type=loss_type,
        beta=BETA, epsilon=EPSILON, epsilon_high=EPSILON_HIGH, bf16=False, use_cpu=True,
        report_to="none", save_strategy="no", seed=0)
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
        train_dataset=datasets.Dataset.from_list([{"prompt": "x"}] * TRAINED))
    file = load_file(rollouts)
    examples = list(read_examples(prefix))[:TRAINED]
    offsets = file["offsets"].tolist()
    width = max(len(ids) for ids, _ in examples) - PROMPT
    completion_ids = torch.zeros(TRAINED, width, dtype=torch.long)
    completion_mask = torch.zeros(TRAINED, width, dtype=torch.long)
    old = torch.zeros(TRAINED, width)
    ref = torch.zeros(TRAINED, width)
    for i, (ids, mask) in enumerate(examples):
        n = len(ids) - PROMPT
        assert mask == [0] * PROMPT + [1] * n
        completion_ids[i, :n] = torch.tensor(ids[PROMPT:])
        completion_mask[i, :n] = 1
        at = offsets[i] + PROMPT
        old[i, :n] = file["old_logprobs"][at:at + n]
        ref[i, :n] = file["ref_logprobs"][at:at + n]
    inputs = {
        "prompt_ids": torch.tensor([ids[:PROMPT] for ids, _ in examples]),
        "prompt_mask": torch.ones(TRAINED, PROMPT, dtype=torch.long),
        "completion_ids": completion_ids, "completion_mask": completion_mask,
        "advantages": file["advantages"][:TRAINED], "old_per_token_logps": old,
        "ref_per_token_logps": ref, "num_items_in_batch": completion_mask.sum()}
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    os.makedirs(out, exist_ok=True)
    json.dump({"loss": loss.item()}, open(os.path.join(out, "loss.json"), "w"))
    with torch.no_grad():
        weights = {k: (v - LR * v.grad if v.grad is not None else v).clone()
                   for k, v in trainer.model.named_parameters()}
    torch.save(weights, os.path.join(out, "weights.pt"))
    print(f"TRL {loss_type}: loss {loss.item():.6g}")


def compare(out, model_dir, metrics_file, exported):
    import transformers
    theirs = json.load(open(os.path.join(out, "loss.json")))["loss"]
    mine = json.loads(open(metrics_file).readline())["loss"]
    bad = []
    if abs(mine - theirs) > 1e-5 * abs(theirs):
        bad.append(f"loss: pipetrain {mine!r}, TRL {theirs!r}")
    trained = torch.load(os.path.join(out, "weights.pt"))
    ours = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    start = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ours, start = dict(ours.named_parameters()), dict(start.named_parameters())
    largest = max((trained[k] - start[k]).abs().max().item() for k in trained)
    assert largest > 1e-4, f"TRL's step moved no weight ({largest})"
    worst, where = max(
        (((ours[k] - start[k]) - (v - start[k])).abs().max().item(), k) for k, v in trained.items())
    if worst > 1e-5 * largest:
        bad.append(f"updates differ by {worst:.3g} at {where} (largest update {largest:.3g})")
    if bad:
        sys.exit("pipetrain's policy-gradient step is not TRL's:\n  " + "\n  ".join(bad))
    print(f"equal to TRL: loss {mine:.6f} (TRL {theirs:.6f}); updates within "
          f"{worst / largest:.2g} of the largest ({largest:.3g})")


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    {"make": make, "trl": run_trl, "compare": compare}[command](*rest)
