"""A tiny character-level GPT on Tiny Shakespeare, in one file that does not import llmevo.

It stands for "anyone's own training script": flags in, a JSON line of metrics out (the last
line of stdout: ``{"val_loss": ..., "train_loss": ..., "parameters": ..., "compute": ...}``,
``compute`` the training compute 6 N D: parameters times tokens seen, times 6). ``experiment.toml`` beside it
declares it to ``llmevo reproduce --experiment``.

    python train.py --steps 200 --norm rmsnorm --lr 3e-3 --seed 42

Data: ``--data FILE``, else ``$TINY_GPT_DATA``, else ``$LLMEVO_DATA/tinyshakespeare/input.txt``.
The first 90% of the characters train, the last 10% validate (a fixed set of evenly spaced
windows). On a CPU with one thread the run is deterministic: same flags, same numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned gain (no mean subtraction, no bias)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(kind: str, dim: int) -> nn.Module:
    return RMSNorm(dim) if kind == "rmsnorm" else nn.LayerNorm(dim)


class ReLU2(nn.Module):
    """Squared ReLU, relu(x)^2 (So et al., Primer, arXiv 2109.08668)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()


def make_activation(kind: str) -> nn.Module:
    return ReLU2() if kind == "relu2" else nn.GELU()


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP (GELU or squared ReLU), each with a residual."""

    def __init__(self, d_model: int, heads: int, norm: str, activation: str) -> None:
        super().__init__()
        self.heads = heads
        self.attention_norm = make_norm(norm, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = make_norm(norm, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), make_activation(activation),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, dim = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).split(dim, dim=-1)  # each (B, T, C)
        shape = (batch, time, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, time, dim))
        return x + self.mlp(self.mlp_norm(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d_model: int, layers: int, heads: int, norm: str,
                 activation: str = "gelu") -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, norm, activation) for _ in range(layers))
        self.final_norm = make_norm(norm, d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, T) -> logits (B, T, V)
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))


def load_text(option: str | None) -> str:
    if option is None:
        option = os.environ.get("TINY_GPT_DATA")
    if option is None:
        option = str(Path(os.environ.get("LLMEVO_DATA", "data")) / "tinyshakespeare" / "input.txt")
    return Path(option).read_text(encoding="utf-8")


def windows(data: torch.Tensor, starts: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = torch.arange(seq_len + 1)
    rows = data[starts[:, None] + offsets]  # (B, T + 1)
    return rows[:, :-1], rows[:, 1:]


@torch.no_grad()
def evaluate(model: nn.Module, data: torch.Tensor, seq_len: int, count: int, batch: int) -> float:
    model.eval()
    starts = torch.linspace(0, len(data) - seq_len - 2, count).long()  # fixed, evenly spaced
    total = 0.0
    for first in range(0, count, batch):
        inputs, targets = windows(data, starts[first:first + batch], seq_len)
        logits = model(inputs)
        total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
    model.train()
    return total / (count * seq_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="the text file (default $LLMEVO_DATA/tinyshakespeare/input.txt)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the initialisation and the batches")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW peak learning rate (cosine decay)")
    parser.add_argument("--d-model", type=int, default=64, help="model width")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--seq-len", type=int, default=64, help="context window in characters")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per step")
    parser.add_argument("--norm", choices=("layernorm", "rmsnorm"), default="layernorm", help="normalisation layer")
    parser.add_argument("--activation", choices=("gelu", "relu2"), default="gelu", help="MLP activation")
    parser.add_argument("--eval-windows", type=int, default=128, help="validation windows")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    text = load_text(args.data)
    alphabet = sorted(set(text))
    lookup = {char: index for index, char in enumerate(alphabet)}
    data = torch.tensor([lookup[char] for char in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train, validation = data[:split], data[split:]

    model = TinyGPT(len(alphabet), args.seq_len, args.d_model, args.layers, args.heads, args.norm,
                    args.activation)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    generator = torch.Generator().manual_seed(args.seed)
    loss = torch.tensor(float("nan"))
    for step in range(args.steps):
        for group in optimizer.param_groups:  # cosine decay to 10% of the peak
            group["lr"] = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        starts = torch.randint(0, len(train) - args.seq_len - 1, (args.batch_size,), generator=generator)
        inputs, targets = windows(train, starts, args.seq_len)
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    val_loss = evaluate(model, validation, args.seq_len, args.eval_windows, 32)
    parameters = sum(p.numel() for p in model.parameters())
    tokens = args.steps * args.batch_size * args.seq_len
    print(json.dumps({"val_loss": val_loss, "train_loss": loss.item(), "parameters": parameters,
                      "compute": 6.0 * parameters * tokens}))


if __name__ == "__main__":
    main()
