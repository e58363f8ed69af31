"""pipetrain's built-in GPT in PyTorch, for the peers: the same layers in the same order
(token + position embedding, pre-LayerNorm blocks with causal attention and an exact-GELU
MLP, a final LayerNorm, an LM head tied to the token embedding), the same initialisation
scheme (N(0, 0.02) weights, zero biases) and the same mean cross-entropy. The class names
match pipetrain's layer types, so "type:GptBlock" splits every system's layers alike.
"""
import torch
from torch import nn
from torch.nn import functional as F

INIT_STD = 0.02


def init_(module):
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() >= 2:
            nn.init.normal_(p, 0.0, INIT_STD)
    return module


class GptEmbedding(nn.Module):
    def __init__(self, vocab, context, d):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(context, d)
        init_(self)

    def forward(self, ids):
        return self.tokens(ids) + self.positions(torch.arange(ids.size(1)))


class GptBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.attention_norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.projection = nn.Linear(d, d)
        self.mlp_norm = nn.LayerNorm(d)
        self.expand = nn.Linear(d, 4 * d)
        self.contract = nn.Linear(4 * d, d)
        init_(self)

    def forward(self, x):
        batch, seq, d = x.shape
        qkv = self.qkv(self.attention_norm(x)).view(batch, seq, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.projection(attended.transpose(1, 2).reshape(batch, seq, d))
        return h + self.contract(F.gelu(self.expand(self.mlp_norm(h))))


def head(embedding, x):
    """The LM head through the tied token embedding."""
    return x @ embedding.tokens.weight.t()


def loss_fn(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


class Gpt(nn.Module):
    """The whole model in one process (the plain loop)."""

    def __init__(self, vocab, context, d, heads, layers):
        super().__init__()
        self.embedding = GptEmbedding(vocab, context, d)
        self.blocks = nn.Sequential(*[GptBlock(d, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        return head(self.embedding, self.norm(self.blocks(self.embedding(ids))))
