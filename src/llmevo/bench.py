"""Throughput and memory of ``llama_modern`` (or any genome): the ``llmevo bench`` numbers.

Training tokens/s counts input tokens through forward, backward, clipping and the
optimizer step; evaluation tokens/s counts tokens through a no-grad forward. Both are
timed after warm-up steps, on random tokens (throughput does not depend on the data).
Peak memory is the process's peak resident set on CPU and the allocator's peak on CUDA.
"""

from __future__ import annotations

import resource
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from llmevo.catalog import build_model
from llmevo.errors import ConfigError
from llmevo.model.config import ComponentChoice, ModelConfig
from llmevo.train.trainer import autocast, build_optimizer

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class BenchResult:
    device: str
    precision: str
    threads: int
    batch_size: int
    seq_len: int
    parameters: int
    train_tokens_per_second: float
    eval_tokens_per_second: float
    train_step_ms: float
    peak_memory_mib: float

    def as_dict(self) -> dict:
        return asdict(self)


def _peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def benchmark(
    config: ModelConfig,
    device: torch.device,
    batch_size: int = 48,
    seq_len: int = 64,
    steps: int = 30,
    warmup: int = 5,
    precision: str = "fp32",
) -> BenchResult:
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision '{precision}'; expected one of: {', '.join(PRECISIONS)}")
    torch.manual_seed(0)
    model = build_model(config).to(device)
    _, optimizer = build_optimizer(ComponentChoice(name="adamw"), model, lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, config.vocab_size, (batch_size, seq_len + 1), device=device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def train_step() -> None:
        with autocast(device, precision):
            logits = model(inputs)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(warmup):
        train_step()
    _sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        train_step()
    _sync(device)
    train_seconds = time.perf_counter() - started

    model.eval()
    with torch.no_grad():
        for _ in range(warmup):
            with autocast(device, precision):
                model(inputs)
        _sync(device)
        started = time.perf_counter()
        for _ in range(steps):
            with autocast(device, precision):
                model(inputs)
        _sync(device)
        eval_seconds = time.perf_counter() - started

    n_tokens = batch_size * seq_len * steps
    return BenchResult(
        device=str(device),
        precision=precision,
        threads=torch.get_num_threads(),
        batch_size=batch_size,
        seq_len=seq_len,
        parameters=sum(p.numel() for p in model.parameters()),
        train_tokens_per_second=n_tokens / train_seconds,
        eval_tokens_per_second=n_tokens / eval_seconds,
        train_step_ms=1000 * train_seconds / steps,
        peak_memory_mib=_peak_memory_mib(device),
    )
