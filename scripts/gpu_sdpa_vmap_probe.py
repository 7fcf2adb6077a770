"""Which fused attention backends survive ``torch.vmap`` forward + backward on this device?

The batched-replica step (``train/replicas.py``) vmaps the model over R replicas. On the first
GPU check (an H200, torch 2.11) its backward failed inside the memory-efficient kernel ("LSE is
not correctly aligned (strideH)"). This probe runs the same shape of work — R replicas of causal
attention over (B, H, T, Dh), q/k/v made by a transpose as the model makes them — under each
backend alone, in fp32 and bf16, and reports ok / the error / milliseconds per forward+backward.

    python scripts/gpu_sdpa_vmap_probe.py [--replicas 8] [--batch 48] [--heads 4] [--seq-len 64]
        [--head-dim 16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "math": SDPBackend.MATH,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def probe(backend: SDPBackend, dtype: torch.dtype, args: argparse.Namespace, device: torch.device) -> dict:
    """One backend at one dtype: vmapped forward + backward, timed over a few repeats."""
    r, b, h, t, dh = args.replicas, args.batch, args.heads, args.seq_len, args.head_dim
    generator = torch.Generator(device="cpu").manual_seed(0)
    weights = torch.randn(r, h * dh, 3 * h * dh, generator=generator).to(device, dtype).requires_grad_()
    x = torch.randn(r, b, t, h * dh, generator=generator).to(device, dtype)

    def one(w: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
        q, k, v = (xs @ w).view(b, t, 3, h, dh).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, H, T, Dh), non-contiguous
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).float().square().mean()

    step = torch.vmap(one)
    try:
        times = []
        for _ in range(args.repeats):
            weights.grad = None
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            with sdpa_kernel([backend]):
                loss = step(weights, x).sum()
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        return {"ok": True, "ms": round(1000 * min(times[1:] or times), 3)}
    except RuntimeError as error:
        return {"ok": False, "error": str(error).splitlines()[0][:200]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for name, backend in BACKENDS.items():
            result = probe(backend, dtype, args, device)
            rows.append({"backend": name, "dtype": str(dtype).removeprefix("torch."), **result})
            detail = f"{result['ms']} ms" if result["ok"] else result["error"]
            print(f"{device.type} {rows[-1]['dtype']:>8} {name:>9}: {'ok ' if result['ok'] else 'FAIL'} {detail}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": device.type, "torch": torch.__version__, "shape": vars(args), "rows": rows},
                      handle, indent=1)


if __name__ == "__main__":
    main()
