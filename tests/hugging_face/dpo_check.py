"""DPO against TRL's DPOTrainer (TRL 1.16) on the same pairs, model, reference and step.

  dpo_check.py trl MODEL PAIRS.jsonl PREFIX OUT [--reference DIR] [--lora ADAPTER_DIR]
                 [--loss sigmoid|hinge|ipo]
      One step of TRL's DPOTrainer on the first 8 pairs of PAIRS.jsonl (pipetrain holds the
      ninth out for validation), all in one batch: SGD at lr 0.5, beta 0.1, the loss type
      (sigmoid by default), no clipping, on the CPU in fp32. The reference: the model DIR (a frozen copy), or with
      --lora the base under the adapters (peft), starting from the adapters pipetrain's run
      began with (its A; B is 0). First checks that TRL's ids of each side are pipetrain's
      (PREFIX, prepare-data --preference). Writes OUT/metrics.json and OUT/weights.pt.
  dpo_check.py compare OUT MODEL METRICS.jsonl EXPORTED [--lora]
      pipetrain's first step (its metrics file and its export: a transformers folder, or with
      --lora a peft adapter) against TRL's: loss and TRL's metrics within 1e-5 relative (1e-7
      absolute about 0), each weight's update within 1e-5 of the largest update.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_masks import read_examples  # noqa: E402

METRICS = ["loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected"]
PAIRS = 8
LR = 0.5


def check_ids(dataset, prefix):
    """TRL's prompt + answer ids and completion masks against pipetrain's prepared pairs."""
    examples = list(read_examples(prefix))
    for i, row in enumerate(dataset):
        for side, key in ((0, "chosen_ids"), (1, "rejected_ids")):
            ids, mask = examples[2 * i + side]
            theirs = row["prompt_ids"] + row[key]
            their_mask = [0] * len(row["prompt_ids"]) + [1] * len(row[key])
            assert ids == theirs, f"pair {i} side {side}: pipetrain's ids {ids} != TRL's {theirs}"
            assert mask == their_mask, f"pair {i} side {side}: masks differ"


def run_trl(model_dir, pairs, prefix, out, reference=None, lora=None, loss="sigmoid"):
    import datasets
    import transformers
    import trl

    torch.manual_seed(0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows = [json.loads(line) for line in open(pairs, encoding="utf-8")][:PAIRS]
    dataset = datasets.Dataset.from_list(rows)
    args = trl.DPOConfig(
        output_dir=os.path.join(out, "trl"), per_device_train_batch_size=PAIRS, max_steps=1,
        learning_rate=LR, optim="sgd", lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=0.0, beta=0.1, loss_type=[loss], max_length=None,
        logging_steps=1, report_to="none", use_cpu=True, save_strategy="no", seed=0,
        dataloader_drop_last=False, bf16=False)  # DPOConfig defaults to bf16 autocast
    if lora:  # TRL makes the peft model; its reference is the base, the adapters disabled
        import peft
        from safetensors.torch import load_file
        adapter = peft.PeftConfig.from_pretrained(lora)
        trainer = trl.DPOTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
            peft_config=peft.LoraConfig(r=adapter.r, lora_alpha=adapter.lora_alpha,
                                        lora_dropout=0.0, bias="none",
                                        target_modules=sorted(adapter.target_modules)))
        named = dict(trainer.model.named_parameters())
        for name, value in load_file(os.path.join(lora, "adapter_model.safetensors")).items():
            if "lora_A" in name:  # pipetrain's first A (its step leaves A as it was: B is 0)
                with torch.no_grad():
                    named[peft_name(name)].copy_(value)
        model = trainer.model
    else:
        reference_model = transformers.AutoModelForCausalLM.from_pretrained(
            reference, dtype=torch.float32)
        trainer = trl.DPOTrainer(model=model, args=args, train_dataset=dataset,
                                 processing_class=tokenizer, ref_model=reference_model)
    check_ids(trainer.train_dataset, prefix)
    trainer.train()
    logged = next(entry for entry in trainer.state.log_history if "rewards/chosen" in entry)
    os.makedirs(out, exist_ok=True)
    json.dump({k: logged[k] for k in METRICS}, open(os.path.join(out, "metrics.json"), "w"))
    if lora:
        weights = {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}
        assert all(".default." in k for k in weights), sorted(weights)
    else:
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save(weights, os.path.join(out, "weights.pt"))
    print("TRL: " + ", ".join(f"{k} {logged[k]:.6g}" for k in METRICS))


def peft_name(saved):
    """peft's name of a saved adapter weight in the model (with the adapter's name)."""
    return saved.replace(".lora_A.weight", ".lora_A.default.weight").replace(
        ".lora_B.weight", ".lora_B.default.weight")


def close(mine, theirs):
    return abs(mine - theirs) <= 1e-5 * abs(theirs) or abs(mine - theirs) <= 1e-7


def compare(out, model_dir, metrics_file, exported, lora=False):
    theirs = json.load(open(os.path.join(out, "metrics.json")))
    mine = json.loads(open(metrics_file).readline())
    bad = [f"{k}: pipetrain {mine[k]!r}, TRL {theirs[k]!r}" for k in METRICS
           if not close(mine[k], theirs[k])]
    # The figures depend on the reference: without it a chosen reward would be beta x its
    # log-probability.
    if abs(theirs["rewards/chosen"] - 0.1 * theirs["logps/chosen"]) < 1e-3:
        bad.append("the reference changes no figure compared: the check could not fail")
    trained = torch.load(os.path.join(out, "weights.pt"))
    from safetensors.torch import load_file
    if lora:
        ours = load_file(os.path.join(exported, "adapter_model.safetensors"))
        ours = {peft_name(k): v for k, v in ours.items()}
        start = {k: torch.zeros_like(v) if "lora_B" in k else ours[k] for k, v in trained.items()}
    else:
        import transformers
        ours = transformers.AutoModelForCausalLM.from_pretrained(
            exported, dtype=torch.float32).state_dict()
        start = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32).state_dict()
    largest = max((trained[k] - start[k]).abs().max().item() for k in trained)
    assert largest > 1e-4, f"TRL's step moved no weight ({largest})"
    worst, where = 0.0, ""
    for name, value in trained.items():
        if name not in ours:
            bad.append(f"{name}: not in pipetrain's export")
            continue
        gap = ((ours[name] - start[name]) - (value - start[name])).abs().max().item()
        if gap > worst:
            worst, where = gap, name
    if worst > 1e-5 * largest:
        bad.append(f"updates differ by {worst:.3g} at {where} (largest update {largest:.3g})")
    if bad:
        sys.exit("pipetrain's DPO step is not TRL's:\n  " + "\n  ".join(bad))
    print(f"equal to TRL: loss {mine['loss']:.6f} (TRL {theirs['loss']:.6f}), "
          f"rewards/margins {mine['rewards/margins']:.4g}; updates within {worst / largest:.2g} "
          f"of the largest ({largest:.3g})")


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    options = {}
    while len(rest) >= 2 and rest[-2].startswith("--"):
        options[rest[-2][2:]] = rest[-1]
        rest = rest[:-2]
    if rest and rest[-1] == "--lora":
        rest, options["lora"] = rest[:-1], True
    if command == "trl":
        run_trl(*rest, **options)
    else:
        compare(*rest, **options)
