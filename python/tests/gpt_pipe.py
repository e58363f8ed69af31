"""A DeepSpeed pipeline script: bench/peers/gpt.py's GPT (pipetrain's built-in GPT in PyTorch)
as LayerSpecs with a tied head, trained with train_batch. Under DeepSpeed it imports deepspeed;
under pipetrain only the two import lines differ (GPT_PIPE_ENGINE picks them).

  gpt_pipe.py --out RESULT.json [--stages S] [--steps N] [--config JSON] ...

Rank 0 writes RESULT.json: the per-step losses, each rank's next() count on the data iterator,
and what --eval asked. --weights DIR saves each rank's initial parameters (DIR/rank_R.pt)."""
import argparse
import json
import os
import pathlib
import sys

import torch

if os.environ.get("GPT_PIPE_ENGINE", "pipetrain") == "deepspeed":
    import deepspeed
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec
else:
    import pipetrain as deepspeed
    from pipetrain.pipe import LayerSpec, PipelineModule, TiedLayerSpec

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers"))
import gpt  # noqa: E402

VOCAB = 256


class GptHead(gpt.GptEmbedding):
    """The head's spec names the built-in GPT's layer type (GptHead), so that checkpoints pass
    between this script and `pipetrain train` (they record each layer's type)."""


class RaisingBlock(gpt.GptBlock):
    """A block whose forward raises on its `at`-th call (the test of a failing layer)."""

    def __init__(self, d, heads, at):
        super().__init__(d, heads)
        self.at, self.calls = at, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == self.at:
            raise ValueError("the block was told to fail")
        return super().forward(x)


class Counting:
    """The data iterator, counting its next() calls."""

    def __init__(self, iterator):
        self.iterator, self.calls = iterator, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.calls += 1
        return next(self.iterator)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--config", default="{}", help="JSON merged over the base config")
    p.add_argument("--sizes", default="32,4,4,16", help="d,heads,layers,context")
    p.add_argument("--partition", default="parameters")
    p.add_argument("--interval", type=int, default=0, help="activation_checkpoint_interval")
    p.add_argument("--optimizer", choices=["config", "adamw", "adamw-groups", "sgd"], default="config")
    p.add_argument("--text", help="train on token windows of this folder (pipetrain only)")
    p.add_argument("--save", help="checkpoint folder (pipetrain only)")
    p.add_argument("--save-at", default="", help="steps to save at, e.g. 0,2,4")
    p.add_argument("--load", help="resume from this checkpoint folder's latest (pipetrain only)")
    p.add_argument("--raise-at", type=int, default=0, help="block 2 raises on this call")
    p.add_argument("--weights", help="save each rank's initial parameters here")
    p.add_argument("--eval", action="store_true", help="eval_batch with return_logits at the end")
    args = p.parse_args()
    d, heads, layers, context = map(int, args.sizes.split(","))

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(7)
    specs = [TiedLayerSpec("embed", gpt.GptEmbedding, VOCAB, context, d,
                           tied_weight_attr="tokens.weight")]
    specs += [LayerSpec(RaisingBlock, d, heads, args.raise_at) if args.raise_at and i == 1
              else LayerSpec(gpt.GptBlock, d, heads) for i in range(layers)]
    specs += [LayerSpec(torch.nn.LayerNorm, d),
              TiedLayerSpec("embed", GptHead, VOCAB, context, d, forward_fn=gpt.head,
                            tied_weight_attr="tokens.weight")]
    module = PipelineModule(specs, num_stages=args.stages, loss_fn=gpt.loss_fn,
                            partition_method=args.partition, seed_layers=True,
                            # DeepSpeed's default seed_fn hands random.seed a numpy integer,
                            # which Python 3.11 refuses: seed torch alone, on both engines.
                            seed_fn=lambda seed: torch.manual_seed(int(seed)),
                            activation_checkpoint_interval=args.interval)
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.0}}}
    config.update(json.loads(args.config))
    optimizer = None
    if args.optimizer == "adamw":
        optimizer = torch.optim.AdamW(module.parameters(), lr=0.001, weight_decay=0.0)
    elif args.optimizer == "sgd":
        optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    elif args.optimizer == "adamw-groups":
        # Megatron's rule ("auto" in pipetrain): no decay for biases, norms and embeddings.
        plain = [p for n, p in module.named_parameters()
                 if p.dim() < 2 or "tokens" in n or "positions" in n]
        decayed = [p for n, p in module.named_parameters() if all(p is not q for q in plain)]
        optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                                       {"params": plain, "weight_decay": 0.0}], lr=0.001)
    training_data = deepspeed.TokenWindows([args.text], context=context) if args.text else None
    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config,
                                           model_parameters=module.parameters(),
                                           training_data=training_data)
    if args.weights:
        os.makedirs(args.weights, exist_ok=True)
        torch.save({n: t.detach().clone() for n, t in module.named_parameters()},
                   os.path.join(args.weights, f"rank_{torch.distributed.get_rank()}.pt"))
    if args.load:
        engine.load_checkpoint(args.load)

    data = None
    if not args.text:
        g = torch.Generator().manual_seed(11)
        samples = config["train_batch_size"] * args.steps
        ids = torch.randint(VOCAB, (samples, context), generator=g)
        labels = torch.randint(VOCAB, (samples, context), generator=g)
        micro = engine.train_micro_batch_size_per_gpu()
        replicas = engine.train_batch_size() // (micro * engine.gradient_accumulation_steps())
        replica = torch.distributed.get_rank() % replicas  # the data axis is the fastest
        batches = [(ids[i:i + micro], labels[i:i + micro])
                   for i in range(replica * micro, samples, replicas * micro)]
        data = Counting(iter(batches))
    save_at = {int(s) for s in args.save_at.split(",") if s}
    losses = []
    if args.save and engine.global_steps in save_at:
        engine.save_checkpoint(args.save)
    while engine.global_steps < args.steps:
        losses.append(float(engine.train_batch(data)))
        if args.save and engine.global_steps in save_at:
            engine.save_checkpoint(args.save)
    result = {"losses": losses}
    if hasattr(engine, "_engine"):  # pipetrain's: the fp16 loss scale the run ended with
        result["loss_scale"] = engine._engine.loss_scale
    result["next_calls"] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(result["next_calls"], data.calls if data else None)
    if args.eval:
        loss, logits = engine.eval_batch(iter(batches[:engine.gradient_accumulation_steps()]),
                                         return_logits=True)
        shapes = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(shapes, list(logits.shape) if logits is not None
                                            else None)
        result["eval"] = {"loss": float(loss), "logits": shapes}
    torch.distributed.barrier()
    if torch.distributed.get_rank() == 0:
        pathlib.Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
