"""A Python script that fine-tunes a transformers model with a built-in family, as a user of the
CLI would from Python: from_pretrained, initialize with a pipetrain train config (its LoRA and
data sections), train_batch over the config's data, a step callback, save_checkpoint, export.

  builtin_script.py --hf FOLDER --imported OUT --config JSON --steps N --save DIR
                    --export DIR --out RESULT.json
"""
import argparse
import json

import pipetrain


def main():
    p = argparse.ArgumentParser()
    for name in ("--hf", "--imported", "--config", "--save", "--export", "--out"):
        p.add_argument(name, required=True)
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()

    pipetrain.init_distributed()
    model = pipetrain.pipe.from_pretrained(args.hf, out=args.imported)
    engine, optimizer, _, _ = pipetrain.initialize(model=model, config=json.loads(args.config))
    metrics = []
    engine.add_step_callback(metrics.append)
    losses = [float(engine.train_batch()) for _ in range(args.steps)]
    engine.save_checkpoint(args.save)
    pipetrain.export(args.save, args.export, format="peft")
    if engine.global_rank == 0:
        with open(args.out, "w") as f:
            json.dump({"losses": losses, "metrics": metrics, "stages": engine.num_stages,
                       "optimizer": optimizer,
                       "trained": sorted(n for n, _ in engine.named_parameters())}, f)


if __name__ == "__main__":
    main()
