"""Throughput and memory of ``llama_modern`` (or any genome): the ``llmevo bench`` numbers.

Training tokens/s counts input tokens through forward, backward, clipping and the
optimizer step; evaluation tokens/s counts tokens through a no-grad forward. Both are
timed after warm-up steps, on random tokens (throughput does not depend on the data).
Peak memory is the process's peak resident set on CPU and the allocator's peak on CUDA.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from llmevo.catalog import build_model
from llmevo.errors import ConfigError
from llmevo.model.config import ComponentChoice, ModelConfig
from llmevo.train.trainer import TrainConfig, autocast, build_optimizer

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


@dataclass(frozen=True)
class ReplicaBenchResult:
    """R training runs of llama_modern executed as ``train_many`` executes them."""

    replicas: int
    path: str
    batch_size: int
    seq_len: int
    steps: int
    train_tokens_per_second: float  # aggregate over the R runs, wall clock incl. set-up
    peak_memory_mib: float
    wall_seconds: float
    speedup: float  # over the single-model figure measured in the same bench run

    def as_dict(self) -> dict:
        return asdict(self)


def check_replica_counts(replicas: list[int], replicas_max: int | None) -> list[int]:
    """Validate ``--replicas`` against ``--replicas-max`` before any training."""
    if not replicas:
        raise ConfigError("--replicas needs at least one count, e.g. --replicas 1,2,4")
    if any(r < 1 for r in replicas):
        raise ConfigError(f"replica counts must be at least 1, got {replicas}")
    if replicas_max is not None:
        if replicas_max < 1:
            raise ConfigError(f"--replicas-max must be at least 1, got {replicas_max}")
        over = [r for r in replicas if r > replicas_max]
        if over:
            raise ConfigError(f"replica counts {over} exceed --replicas-max {replicas_max}")
    return replicas


def _measure_runs(config: ModelConfig, device: torch.device, replicas: int, train: TrainConfig,
                  path: str, workers: int | None) -> tuple[float, float, str]:
    """Wall seconds, peak MiB and path of ``replicas`` runs through ``train_many``."""
    from llmevo.train.many import RunSpec, train_many

    generator = torch.Generator().manual_seed(0)
    stream = torch.randint(0, config.vocab_size, (200_000,), generator=generator)
    runs = [RunSpec(seed=seed, config=train) for seed in range(replicas)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    started = time.perf_counter()
    outcomes = train_many(lambda: build_model(config), stream, runs, device, path=path,
                          replicas_max=replicas, workers=workers)
    _sync(device)
    wall = time.perf_counter() - started
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:  # this process plus its worker processes (each counted at the largest one's peak)
        kinds = {o.path for o in outcomes}
        n_workers = min(workers or os.cpu_count() or 1, replicas) if any("parallel" in k for k in kinds) else 0
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + n_workers * children
    return wall, peak, ",".join(sorted({o.path for o in outcomes}))


def _measure_spawned(queue: Any, threads: int, args: tuple) -> None:
    torch.set_num_threads(threads)
    try:
        queue.put(("ok", _measure_runs(*args)))
    except BaseException as error:  # noqa: BLE001  (re-raised in the parent)
        queue.put(("error", f"{type(error).__name__}: {error}"))


def _measure_in_child(*args: object) -> tuple[float, float, str]:
    """On CPU: measure in a fresh (spawned) process, so its peak resident set is this R's
    alone; spawned, not forked, because OpenMP threads do not survive a fork."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_measure_spawned, args=(queue, torch.get_num_threads(), args))
    process.start()
    kind, value = queue.get()
    process.join()
    if kind != "ok":
        raise RuntimeError(f"replica benchmark failed: {value}")
    return value


def benchmark_replicas(
    config: ModelConfig,
    device: torch.device,
    replicas: list[int],
    batch_size: int = 48,
    seq_len: int = 64,
    steps: int = 20,
    path: str | list[str] = "auto",
    replicas_max: int | None = None,
    workers: int | None = None,
    single_model_tokens_per_second: float | None = None,
) -> list[ReplicaBenchResult]:
    """Aggregate training tokens/s and peak memory of R runs, for each R in ``replicas``.

    Each R trains R seeds of ``config`` for ``steps`` steps through ``train_many`` (model
    building, window sampling, worker start-up included: the way reproduce runs them).
    ``speedup`` divides by ``single_model_tokens_per_second`` (today's single-model
    ``benchmark`` figure, measured by the caller in the same run). Several ``path`` values
    measure each R under each path, side by side in one run.
    """
    check_replica_counts(replicas, replicas_max)
    train = TrainConfig(steps=steps, batch_size=batch_size, seq_len=seq_len, lr=1e-3)
    results = []
    paths = [path] if isinstance(path, str) else list(path)
    for count, chosen in ((c, p) for c in replicas for p in paths):
        args = (config, device, count, train, chosen, workers)
        wall, peak, ran = _measure_in_child(*args) if device.type == "cpu" else _measure_runs(*args)
        tokens_per_second = count * steps * batch_size * seq_len / wall
        results.append(ReplicaBenchResult(
            replicas=count, path=ran, batch_size=batch_size, seq_len=seq_len, steps=steps,
            train_tokens_per_second=tokens_per_second, peak_memory_mib=peak, wall_seconds=wall,
            speedup=tokens_per_second / single_model_tokens_per_second
            if single_model_tokens_per_second else float("nan"),
        ))
    return results
