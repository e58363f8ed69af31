"""The script's layers (gpt_pipe.py, one stage, SGD with momentum 0.9) trained by a plain PyTorch loop: torch.optim.SGD
over 8 micro-batches of the same random tokens, gradients clipped to norm 1.0 (DeepSpeed's default, which the
script's config leaves as it is); prints the per-step losses as JSON."""
import sys, torch, json
import pathlib
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "bench" / "peers")); sys.path.insert(0, str(HERE))
import gpt
from gpt_pipe import GptHead
import pipetrain
from pipetrain.pipe import PipelineModule, LayerSpec, TiedLayerSpec
pipetrain.init_distributed()
torch.manual_seed(7)
d, heads, layers, context, V = 32, 4, 4, 16, 256
specs = [TiedLayerSpec("embed", gpt.GptEmbedding, V, context, d, tied_weight_attr="tokens.weight")]
specs += [LayerSpec(gpt.GptBlock, d, heads) for i in range(layers)]
specs += [LayerSpec(torch.nn.LayerNorm, d), TiedLayerSpec("embed", GptHead, V, context, d, forward_fn=gpt.head, tied_weight_attr="tokens.weight")]
m = PipelineModule(specs, num_stages=1, loss_fn=gpt.loss_fn, partition_method="type:GptBlock", seed_layers=True, seed_fn=lambda s: torch.manual_seed(int(s)))
opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator().manual_seed(11)
ids = torch.randint(V, (8 * int(sys.argv[1]), context), generator=g); labels = torch.randint(V, (8 * int(sys.argv[1]), context), generator=g)
losses = []
for step in range(int(sys.argv[1])):
    opt.zero_grad(); tot = 0
    for k in range(8):
        i = step * 8 + k
        loss = gpt.loss_fn(m(ids[i:i+1]), labels[i:i+1]) / 8
        loss.backward(); tot += loss.item()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step(); losses.append(tot)
print(json.dumps(losses))
