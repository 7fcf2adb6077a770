"""The attention-logit range of llama_modern trained at a preset, and what a soft cap does to it.

Trains plain llama_modern (mha) at ``--preset`` (default quick, its preset lr, untuned) for one
seed through the shared runner, then reads every layer's attention logits
``q k^T / sqrt(Dh)`` on the first validation windows and reports, per layer: the standard
deviation, the 99th / 99.9th percentiles and the maximum of ``|logit|``; and per candidate
cap ``c``: the largest change ``max |c tanh(x / c) - x|``, the mean relative change of the
top 1% of logits, and the mean total-variation distance between each query's softmax over
the raw and over the capped logits (what capping does to the attention weights). The numbers
behind softcap's default cap (docs/LOG.md, 2026-12-04).

    PYTHONPATH=src LLMEVO_DATA=... python scripts/softcap_logit_range.py --preset quick
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from llmevo.components.attention.mha import causal_mask
from llmevo.components.attention.softcap import soft_cap
from llmevo.components.base import AttentionContext
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.runner.arm import Arm
from llmevo.runner.presets import get_preset
from llmevo.runner.run import run_arm, seed_runs
from llmevo.runner.views import load_views

CAPS = (3.0, 5.0, 8.0, 10.0, 12.0, 15.0, 20.0, 30.0, 50.0)


def attention_logits(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's causal attention logits on ``tokens`` (B, T): [(B, H, T, T) masked to the causal part]."""
    found = []
    positions = torch.arange(tokens.shape[1])
    x = model.position.embed(model.embedding(tokens), positions)  # (B, T, D)
    context = AttentionContext(positions=positions, position=model.position)
    for block in model.blocks:
        q, k, _ = block.attention.project(block.attention_norm(x), context)
        logits = block.attention.logits(q, k, context, context.positions)  # (B, H, T, T)
        found.append(logits)
        x = block(x, context)
    return found


def describe(logits: torch.Tensor, allowed: torch.Tensor) -> dict:
    visible = logits[..., allowed]  # (B, H, n visible)
    magnitude = visible.abs().flatten()
    top = magnitude >= torch.quantile(magnitude, 0.99)
    row = {"std": visible.std().item(), "p99": torch.quantile(magnitude, 0.99).item(),
           "p999": torch.quantile(magnitude, 0.999).item(), "max": magnitude.max().item(), "caps": {}}
    raw = logits.masked_fill(~allowed, -torch.inf).softmax(-1)
    for cap in CAPS:
        capped = soft_cap(logits, cap)
        change = (capped - logits)[..., allowed].abs().flatten()
        weights = capped.masked_fill(~allowed, -torch.inf).softmax(-1)
        row["caps"][str(cap)] = {
            "max_change": change.max().item(),
            "top1pct_relative_change": (change[top] / magnitude[top]).mean().item(),
            "softmax_tv": 0.5 * (weights - raw).abs().sum(-1).mean().item(),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--windows", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    corpus, preset, views = load_views(get_preset(args.preset), ["bpe"], Path(os.environ["LLMEVO_DATA"]),
                                       Path(".cache/llmevo"))
    data = views["bpe"]
    arm = Arm("baseline", "llama_modern", ModelConfig(), ComponentChoice(name="adamw"))
    started = time.perf_counter()
    (run,) = run_arm(arm, data, preset, seed_runs(arm, data, preset, [args.seed]), torch.device("cpu"),
                     splits=("validation",))
    seq_len = preset.train.seq_len
    tokens = data.validation[: args.windows * seq_len].view(args.windows, seq_len)
    model = run.model.cpu().eval()
    with torch.no_grad():
        allowed = causal_mask(seq_len, seq_len, tokens.device)
        layers = [describe(logits, allowed) for logits in attention_logits(model, tokens)]
        output = model(tokens)  # (B, T, V)
    report = {"preset": preset.name, "seed": args.seed, "steps": preset.train.steps,
              "train_seconds": time.perf_counter() - started, "lm_loss": run.validation["lm_loss"],
              "output_logits": {"std": output.std().item(), "max_abs": output.abs().max().item()},
              "layers": layers}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
