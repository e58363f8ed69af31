"""Fine-tune a transformers model with LoRA from Python, on pipetrain's built-in family, logging
each step's metrics to TensorBoard through a step callback.

  pipetrain launch -n 2 -- python examples/python/lora_tensorboard.py \
      --hf hf-model --data chats/ --steps 20 --tensorboard runs/lora --export adapter

--hf is a transformers model folder (config.json, model.safetensors, tokenizer files); --data
a folder of text files (or give a pipetrain train config's data section with --config). The
adapters are exported for peft at the end. See docs/user/python.md.
"""
import argparse
import json

from torch.utils.tensorboard import SummaryWriter

import pipetrain


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hf", required=True, help="transformers model folder")
    p.add_argument("--data", help="folder of text files (data.type text)")
    p.add_argument("--config", default="{}", help="JSON merged over the config below")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--tensorboard", required=True, help="TensorBoard log folder")
    p.add_argument("--save", help="checkpoint folder, saved at the end")
    p.add_argument("--export", help="write the adapters here for peft at the end (needs --save)")
    args = p.parse_args()

    pipetrain.init_distributed()
    model = pipetrain.pipe.from_pretrained(args.hf)  # imported by rank 0 into a new folder
    config = {
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "scheduler": {"type": "WarmupCosineLR",
                      "params": {"warmup_num_steps": 2, "total_num_steps": args.steps}},
        "pipeline": {"stages": 2},
        "lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj",
                                                            "o_proj"]},
    }
    if args.data:
        config["data"] = {"type": "text", "paths": [args.data]}
    config.update(json.loads(args.config))
    engine, _, _, _ = pipetrain.initialize(model=model, config=config)

    writer = SummaryWriter(args.tensorboard) if engine.global_rank == 0 else None

    # Called on global rank 0 after every step (registered on every rank: the gradient norm is
    # then computed by all): any logger plugs in here (W&B, MLflow, ...).
    def log(metrics):
        for name in ("loss", "grad_norm", "lr", "samples_per_s", "tokens_per_s", "mfu",
                     "memory_gib"):
            if metrics[name] is not None:
                writer.add_scalar(f"train/{name}", metrics[name], metrics["step"])
        print(f"step {metrics['step']} loss {metrics['loss']:.4f} lr {metrics['lr']:.3g}",
              flush=True)

    engine.add_step_callback(log)
    for _ in range(args.steps):
        engine.train_batch()
    if writer:
        writer.close()
    if args.save:
        engine.save_checkpoint(args.save)
        if args.export:
            pipetrain.export(args.save, args.export, format="peft")


if __name__ == "__main__":
    main()
