"""The llama_modern training step before and after the 2026-12-01 step optimisations,
measured side by side in one process (docs/LOG.md, "A cheaper single-model step").

The "before" functions are the previous implementations of ``apply_rotary`` (four strided
multiplies, a stack and a cat) and ``rms_norm`` (the written-out formula); they are patched
into their modules for the "before" blocks and removed for the "after" blocks, so both
variants run the same model, optimizer and inputs under the same machine load. Blocks
alternate (before, after, before, ...); per-step wall time and this thread's CPU time are
the medians over blocks. Then ``llmevo.bench.profile_step`` profiles each variant.

    PYTHONPATH=src python scripts/step_before_after.py --threads 1 --blocks 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import llmevo.components.norm.rmsnorm as rmsnorm_module
import llmevo.components.position.rope as rope_module
from llmevo.bench import _training_step, profile_step
from llmevo.model.config import ModelConfig


def rms_norm_before(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def apply_rotary_before(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    rotary_dim = 2 * inv_freq.shape[0]
    angles = positions.to(torch.float32)[..., None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rotated, tail = x[..., :rotary_dim], x[..., rotary_dim:]
    pairs = rotated.unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return torch.cat((out.flatten(-2), tail), dim=-1)


AFTER = {"rope": rope_module.apply_rotary, "norm": rmsnorm_module.rms_norm}


def use(variant: str) -> None:
    before = variant == "before"
    rope_module.apply_rotary = apply_rotary_before if before else AFTER["rope"]
    rmsnorm_module.rms_norm = rms_norm_before if before else AFTER["norm"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--steps-per-block", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    _, _, step = _training_step(ModelConfig(), torch.device("cpu"), 48, 64, "fp32")
    for variant in ("before", "after"):
        use(variant)
        for _ in range(3):
            step()
    timings: dict[str, dict[str, list[float]]] = {v: {"wall_ms": [], "cpu_ms": []} for v in ("before", "after")}
    for _ in range(args.blocks):
        for variant in ("before", "after"):
            use(variant)
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps_per_block):
                step()
            timings[variant]["wall_ms"].append(1000 * (time.perf_counter() - wall) / args.steps_per_block)
            timings[variant]["cpu_ms"].append(1000 * (time.process_time() - cpu) / args.steps_per_block)
    summary = {v: {k: statistics.median(x) for k, x in t.items()} for v, t in timings.items()}
    profiles = {}
    for variant in ("before", "after"):
        use(variant)
        profiles[variant] = profile_step(ModelConfig(), torch.device("cpu"), steps=20, warmup=3, top=12).as_dict()
    use("after")
    result = {"threads": args.threads, "blocks": args.blocks, "steps_per_block": args.steps_per_block,
              "median": summary, "profiles": profiles,
              "wall_ratio": summary["before"]["wall_ms"] / summary["after"]["wall_ms"],
              "cpu_ratio": summary["before"]["cpu_ms"] / summary["after"]["cpu_ms"]}
    print(json.dumps({k: v for k, v in result.items() if k != "profiles"}, indent=1))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
