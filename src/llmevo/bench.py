"""Throughput and memory of ``llama_modern`` (or any genome): the ``llmevo bench`` numbers.

Training tokens/s counts input tokens through forward, backward, clipping and the
optimizer step; evaluation tokens/s counts tokens through a no-grad forward. Both are
timed after warm-up steps, on random tokens (throughput does not depend on the data).
Peak memory is the process's peak resident set on CPU and the allocator's peak on CUDA.

``benchmark``: the single-model figures. ``profile_step``: where one training step's time
goes, op by op (``torch.profiler``, grouped by op, sorted by self CPU time).
``benchmark_replicas``: R runs through ``train_many`` per execution path, with set-up and
steady state separated and each path's ratio to the same R runs executed sequentially.
``benchmark_fixed_costs``: a command's wall time (a warm smoke reproduction, say) next to
``import torch``'s, each in fresh processes, and their ratio: what a command costs beyond
the library it cannot avoid importing.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from llmevo.catalog import build_model, build_optimizer
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.train.trainer import TrainConfig, autocast

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


def _timed(step: Callable[[], None], device: torch.device, warmup: int, steps: int) -> float:
    """Seconds for ``steps`` calls of ``step`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    _sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return time.perf_counter() - started


def _training_step(config: ModelConfig, device: torch.device, batch_size: int, seq_len: int,
                   precision: str) -> tuple[torch.nn.Module, torch.Tensor, Callable[[], None]]:
    """A seeded model, its (B, T) inputs and one AdamW training step on random tokens."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision '{precision}'; expected one of: {', '.join(PRECISIONS)}")
    torch.manual_seed(0)
    model = build_model(config).to(device)
    optimizer = build_optimizer(ComponentChoice(name="adamw")).build(model, lr=1e-3, weight_decay=0.01)
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

    return model, inputs, train_step


def benchmark(
    config: ModelConfig,
    device: torch.device,
    batch_size: int = 48,
    seq_len: int = 64,
    steps: int = 30,
    warmup: int = 5,
    precision: str = "fp32",
) -> BenchResult:
    model, inputs, train_step = _training_step(config, device, batch_size, seq_len, precision)
    train_seconds = _timed(train_step, device, warmup, steps)

    def evaluate() -> None:
        with autocast(device, precision):
            model(inputs)

    model.eval()
    with torch.no_grad():
        eval_seconds = _timed(evaluate, device, warmup, steps)

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
class ProfiledOp:
    """One op's share of a training step (self time: excluding the ops it calls)."""

    op: str
    self_ms_per_step: float
    share_of_step: float  # self time / summed self time of every op, in [0, 1]
    calls_per_step: float


@dataclass(frozen=True)
class StepProfile:
    step_ms: float  # timed without the profiler attached
    profiled_step_ms: float  # summed self CPU time per step under the profiler
    threads: int
    ops: list[ProfiledOp]

    def as_dict(self) -> dict:
        return asdict(self)


def profile_step(
    config: ModelConfig,
    device: torch.device,
    batch_size: int = 48,
    seq_len: int = 64,
    steps: int = 10,
    warmup: int = 5,
    precision: str = "fp32",
    top: int = 15,
) -> StepProfile:
    """Where one training step's CPU time goes: ``torch.profiler`` over ``steps`` steps,
    ops grouped by name, the ``top`` largest by self CPU time (the rest summed as
    ``(other ops)``). The step is ``benchmark``'s: forward, cross-entropy, backward,
    clipping and AdamW on random tokens."""
    from torch.profiler import ProfilerActivity, profile

    _, _, train_step = _training_step(config, device, batch_size, seq_len, precision)
    step_ms = 1000 * _timed(train_step, device, warmup, steps) / steps
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            train_step()
        _sync(device)
    # self times in microseconds; autograd/optimizer wrapper events have ~0 self time
    events = [(e.key, e.self_cpu_time_total, e.count) for e in profiler.key_averages()]
    events = [e for e in events if e[1] > 0]
    total = sum(e[1] for e in events)
    events.sort(key=lambda e: -e[1])
    shown, rest = events[:top], events[top:]
    if rest:
        shown.append(("(other ops)", sum(e[1] for e in rest), sum(e[2] for e in rest)))
    ops = [ProfiledOp(op=name, self_ms_per_step=micros / 1000 / steps, share_of_step=micros / total,
                      calls_per_step=count / steps) for name, micros, count in shown]
    return StepProfile(step_ms=step_ms, profiled_step_ms=total / 1000 / steps,
                       threads=torch.get_num_threads(), ops=ops)


@dataclass(frozen=True)
class ReplicaBenchResult:
    """R training runs of llama_modern executed as ``train_many`` executes them.

    Each (R, path) is measured twice, with ``steps`` steps and with one step, so that the
    wall time splits as ``wall(s) = setup_seconds + s * step_seconds``: ``setup_seconds``
    is what R runs pay before their first step (model building, optimizer construction,
    worker start-up), ``steady_tokens_per_second`` the aggregate rate once they run.
    """

    replicas: int
    path: str  # how the runs executed (train_many's outcome paths)
    requested_path: str  # the --path values resolved to this path; "" for the added baseline
    batch_size: int
    seq_len: int
    steps: int
    train_tokens_per_second: float  # aggregate over the R runs, wall clock incl. set-up
    steady_tokens_per_second: float  # aggregate, set-up excluded (NaN if noise hid it)
    setup_seconds: float
    wall_seconds: float
    peak_memory_mib: float
    speedup: float  # train_tokens_per_second over the single-model figure of the same bench run
    vs_sequential: float  # train_tokens_per_second over the sequential row of the same R
    steady_vs_sequential: float  # the same ratio of the steady-state figures

    def as_dict(self) -> dict:
        return asdict(self)


def check_replica_counts(replicas: list[int], replicas_max: int | None) -> list[int]:
    """Validate ``--replicas`` against ``--replicas-max`` before any training."""
    if not replicas:
        raise ConfigError("--replicas needs at least one count, e.g. --replicas 1,2,4")
    if any(r < 1 for r in replicas):
        raise ConfigError(f"replica counts must be at least 1, got {replicas}")
    if len(set(replicas)) != len(replicas):
        raise ConfigError(f"replica counts must not repeat, got {replicas}")
    if replicas_max is not None:
        if replicas_max < 1:
            raise ConfigError(f"--replicas-max must be at least 1, got {replicas_max}")
        over = [r for r in replicas if r > replicas_max]
        if over:
            raise ConfigError(f"replica counts {over} exceed --replicas-max {replicas_max}")
    return replicas


def check_paths(paths: list[str], replicas_max: int | None, workers: int | None) -> None:
    """Validate the execution paths to measure (each by ``llmevo.train.execution.check_path``):
    at least one, each once, and ``workers`` only with a path that runs workers."""
    from llmevo.train.execution import check_path

    if not paths:
        raise ConfigError("--path needs at least one execution path")
    for path in paths:
        check_path(path, replicas_max, workers)
    repeated = sorted({path for path in paths if paths.count(path) > 1})
    if repeated:
        raise ConfigError(f"--path: {', '.join(repeated)} is named twice; name each path once")
    if workers is not None and not any(p == "auto" or p.startswith("parallel") for p in paths):
        raise ConfigError("--workers applies to the parallel paths (parallel, parallel-batched, "
                          "auto on a CPU); none is measured here")


def _measure_runs(config: ModelConfig, device: torch.device, replicas: int, train: TrainConfig,
                  path: str, workers: int | None) -> tuple[float, float, str]:
    """Wall seconds, peak MiB and path of ``replicas`` runs through ``train_many``."""
    from llmevo.train.execution import RunSpec, train_many

    generator = torch.Generator().manual_seed(0)
    stream = torch.randint(0, config.vocab_size, (200_000,), generator=generator)
    runs = [RunSpec(seed=seed, config=train) for seed in range(replicas)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    started = time.perf_counter()
    outcomes = train_many(lambda: build_model(config), stream, runs, device,
                          build_optimizer=build_optimizer, path=path, replicas_max=replicas,
                          workers=workers)
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
    from llmevo.train.execution import die_with_parent

    die_with_parent()
    torch.set_num_threads(threads)
    try:
        queue.put(("ok", _measure_runs(*args)))
    except BaseException as error:  # noqa: BLE001  (re-raised in the parent)
        queue.put(("error", f"{type(error).__name__}: {error}"))


def _measure_in_child(*args: object) -> tuple[float, float, str]:
    """On CPU: measure in a fresh (spawned) process, so its peak resident set and its
    one-off imports are this measurement's alone, as in a fresh ``reproduce``; spawned,
    not forked, because OpenMP threads do not survive a fork."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_measure_spawned, args=(queue, torch.get_num_threads(), args))
    process.start()
    kind, value = queue.get()
    process.join()
    if kind != "ok":
        raise RuntimeError(f"replica benchmark failed: {value}")
    return value


def _plan_paths(replicas: int, paths: list[str], device: torch.device) -> list[tuple[str, str]]:
    """(path to run, requested names) per measurement of R runs, sequential first.

    ``auto`` resolves to ``default_path(device)`` and duplicates merge. One run is a plain
    ``train()`` call on every path, so R = 1 is measured once. For R > 1 the sequential
    path is always measured (the ratio's denominator), added with no requested name if
    it was not asked for."""
    from llmevo.train.execution import default_path

    resolved: dict[str, list[str]] = {}
    for name in paths:
        concrete = default_path(device) if name == "auto" else name
        if replicas == 1:
            concrete = "sequential"
        resolved.setdefault(concrete, []).append(name)
    if device.type != "cpu":  # worker processes are CPU-only
        resolved = {p: names for p, names in resolved.items() if not p.startswith("parallel")} or {
            "sequential": []}
    resolved.setdefault("sequential", [])
    order = ["sequential"] + [p for p in resolved if p != "sequential"]
    return [(p, ",".join(resolved[p])) for p in order]


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator and math.isfinite(denominator) else float("nan")


def benchmark_replicas(
    config: ModelConfig,
    device: torch.device,
    replicas: list[int],
    batch_size: int = 48,
    seq_len: int = 64,
    steps: int = 60,
    path: str | list[str] = "auto",
    replicas_max: int | None = None,
    workers: int | None = None,
    single_model_tokens_per_second: float | None = None,
    isolate: bool = True,
) -> list[ReplicaBenchResult]:
    """Aggregate training tokens/s and peak memory of R runs, for each R in ``replicas``.

    Each R trains R seeds of ``config`` through ``train_many`` (model building, window
    sampling, worker start-up included: the way reproduce runs them), once with ``steps``
    steps and once with one step, to separate set-up from the steady state. ``path`` names
    the execution paths to measure side by side (``auto``: the default for the device);
    the sequential path is always measured too, and every row carries its ratio to it
    (``vs_sequential``: the issue's "R runs the default way vs the same R runs one after
    another"). ``speedup`` divides by ``single_model_tokens_per_second`` (the caller's
    ``benchmark`` figure from the same run). ``isolate`` (CPU): each measurement in a
    fresh spawned process (peak memory and one-off imports its own); False measures in
    this process.
    """
    check_replica_counts(replicas, replicas_max)
    paths = [path] if isinstance(path, str) else list(path)
    check_paths(paths, replicas_max, workers)
    if steps < 2:
        raise ConfigError(f"the replica benchmark needs at least 2 steps per run, got {steps}")
    measure = _measure_in_child if isolate and device.type == "cpu" else _measure_runs
    results = []
    for count in replicas:
        rows = []
        for chosen, requested in _plan_paths(count, paths, device):
            walls = {}
            for n_steps in (steps, 1):
                train = TrainConfig(steps=n_steps, batch_size=batch_size, seq_len=seq_len, lr=1e-3)
                walls[n_steps] = measure(config, device, count, train, chosen, workers)
            wall, peak, ran = walls[steps]
            step_seconds = (wall - walls[1][0]) / (steps - 1)
            tokens = count * batch_size * seq_len
            steady = tokens / step_seconds if step_seconds > 0 else float("nan")
            rows.append(dict(
                replicas=count, path=ran, requested_path=requested, batch_size=batch_size,
                seq_len=seq_len, steps=steps, train_tokens_per_second=tokens * steps / wall,
                steady_tokens_per_second=steady,
                setup_seconds=wall - steps * step_seconds if step_seconds > 0 else float("nan"),
                wall_seconds=wall, peak_memory_mib=peak,
                speedup=_ratio(tokens * steps / wall, single_model_tokens_per_second or float("nan")),
            ))
        sequential = rows[0]  # _plan_paths puts it first
        for row in rows:
            results.append(ReplicaBenchResult(
                **row,
                vs_sequential=_ratio(row["train_tokens_per_second"], sequential["train_tokens_per_second"]),
                steady_vs_sequential=_ratio(row["steady_tokens_per_second"],
                                            sequential["steady_tokens_per_second"]),
            ))
    return results


IMPORT_TORCH = (sys.executable, "-c", "import torch")


@dataclass(frozen=True)
class FixedCostResult:
    command: list[str]
    repetitions: int
    import_torch_seconds: list[float]  # each repetition's, in the order run
    command_seconds: list[float]

    @property
    def import_torch_median(self) -> float:
        return statistics.median(self.import_torch_seconds)

    @property
    def command_median(self) -> float:
        return statistics.median(self.command_seconds)

    @property
    def ratio(self) -> float:
        """The command's median wall time over ``import torch``'s."""
        return _ratio(self.command_median, self.import_torch_median)

    def as_dict(self) -> dict:
        return asdict(self) | {"import_torch_median": self.import_torch_median,
                               "command_median": self.command_median, "ratio": self.ratio}


def _wall_seconds(command: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(list(command), capture_output=True, text=True,
                          env=None if env is None else dict(env))
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ConfigError(f"`{' '.join(command)}` exited with {done.returncode}: {' / '.join(tail)}")
    return seconds


def benchmark_fixed_costs(command: Sequence[str], repetitions: int = 5,
                          baseline: Sequence[str] = IMPORT_TORCH,
                          env: Mapping[str, str] | None = None) -> FixedCostResult:
    """``command``'s wall time beside ``baseline``'s (``import torch`` in a fresh interpreter),
    each run ``repetitions`` times in fresh processes, alternating so that a load that comes
    and goes on a shared machine falls on both; each is run once untimed first (a cold arm
    cache filled, files in the page cache, and, where ``env`` lets Python write it, the
    bytecode cache of every module the command imports: torch's came with its wheel). Both run
    in ``env`` (None: this process's environment). A failing run is a ``ConfigError`` with its
    last lines. The figures to read are the medians and their ratio."""
    if repetitions < 1:
        raise ConfigError(f"the fixed-cost benchmark needs at least 1 repetition, got {repetitions}")
    _wall_seconds(command, env)
    _wall_seconds(baseline, env)
    baseline_seconds, command_seconds = [], []
    for _ in range(repetitions):
        baseline_seconds.append(_wall_seconds(baseline, env))
        command_seconds.append(_wall_seconds(command, env))
    return FixedCostResult(list(command), repetitions, baseline_seconds, command_seconds)
