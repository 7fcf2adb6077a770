"""Many training runs of one architecture: the seam every multi-run caller goes through.

A reproduction trains each arm under several seeds, a tuned comparison trains each arm
under several learning rates, evolution rescoring trains a genome under several seeds.
All of them describe their runs as ``RunSpec`` values (a seed and the resolved
``TrainConfig`` of that run) and call ``train_many``; how the runs are executed is decided
here and nowhere else:

- ``sequential``: one ``train()`` call after another, in this process;
- ``batched``: runs with compatible settings (``replica_group_key``) trained together as
  replicas (``llmevo.train.replicas``), at most ``replicas_max`` at once;
- ``parallel``: ``train()`` calls spread over single-thread worker processes (forked, CPU);
- ``parallel-batched``: batched replica groups spread over single-thread workers.

``path="auto"`` picks ``default_path(device)``: the fastest measured on that kind of
device (docs/LOG.md, 2026-12-01). A model with a part that cannot run batched
(``replica_refusals``) falls back to ``sequential`` (or ``parallel``), and the outcome's
``note`` names the part; an optimizer without a batched implementation (its component's
``batched`` is None) does the same.

Each run starts from ``torch.manual_seed(spec.seed)`` before its model is built, and
draws its training windows from a generator seeded by ``spec.seed``, exactly as a lone
``train()`` call does, so a run's token-stream hash and losses do not depend on which
other runs it was trained with or on the path (within float tolerance for batched ones).

Worker processes never outlive the command: each dies with its parent (``die_with_parent``,
shared with evolution's workers and the benchmark's), the parent stops them on the way out
of any exception (Ctrl-C and SIGTERM included), and they leave SIGINT to the parent: a
terminal's Ctrl-C reaches the whole process group, and only the parent decides.

Public API: ``RunSpec``, ``RunOutcome``, ``train_many``, ``PATHS``, ``default_path``,
``check_path``, ``die_with_parent``.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from llmevo import interrupts
from llmevo.components.data.base import TrainStream
from llmevo.components.optim.base import OptimizerFactory
from llmevo.errors import ConfigError, LlmevoError
from llmevo.train.logging import RunLogger, RunLogs, StepLogger, StepRecord
from llmevo.train.replicas import replica_group_key, replica_refusals, train_replicas
from llmevo.train.trainer import Progress, TrainConfig, TrainResult, ValidationProbe, train

PATHS = ("auto", "sequential", "batched", "parallel", "parallel-batched")
WORKER_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@dataclass(frozen=True)
class RunSpec:
    """One training run: its seed (initialisation and windows) and its settings."""

    seed: int
    config: TrainConfig
    label: str = ""
    # stop after this many steps (a multi-fidelity rung, ``runner.fidelity``): the run keeps its
    # full settings (``config.steps`` sets the schedule) and ends early; None: trains to the end
    stop_after: int | None = None


@dataclass(frozen=True)
class Execution:
    """How the runs of one arm are executed: a ``train_many`` path and a replica cap; and
    ``val_every``: a report run's validation curve, every this many steps (``--val-every``;
    None: none, the default; ``runner.run.run_arm`` builds the probe); ``branches``: shorter
    horizons (steps) each run also trains as decay branches of itself and keeps in the arm
    cache as those runs (``--branches``, ``runner.run.run_arm``)."""

    path: str = "auto"
    replicas_max: int | None = None
    val_every: int | None = None
    branches: tuple[int, ...] = ()


@dataclass
class RunOutcome:
    spec: RunSpec
    model: nn.Module
    result: TrainResult
    path: str  # how it ran: sequential, batched, parallel or parallel-batched
    note: str = ""  # why a requested batched path fell back, if it did
    logger: RunLogger | None = None  # with ``logs``: this run's log, its steps written, still open


class _Recording:
    """A ``StepLogger`` keeping the records (a worker's, sent to the parent with its runs)."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def log_step(self, record: StepRecord) -> None:
        self.records.append(record)


def _log_name(spec: RunSpec) -> str:
    """The name of a run's log: its label, else ``seed<seed>``."""
    return spec.label or f"seed{spec.seed}"


def default_path(device: torch.device) -> str:
    """The fastest path measured on this kind of device (docs/LOG.md, 2026-12-01)."""
    if device.type == "cpu":  # batching does not pay on a CPU; both cores do
        return "parallel" if (os.cpu_count() or 1) > 1 else "sequential"
    return "batched"


def check_path(path: str, replicas_max: int | None = None, workers: int | None = None) -> None:
    """Validate the execution options (a one-line ConfigError), before any work."""
    if path not in PATHS:
        raise ConfigError(f"unknown training path '{path}'; expected one of: {', '.join(PATHS)}")
    if replicas_max is not None and replicas_max < 1:
        raise ConfigError(f"--replicas-max must be at least 1, got {replicas_max}")
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")


def _validate(runs: Sequence[RunSpec], path: str, replicas_max: int | None,
              workers: int | None, device: torch.device) -> None:
    if not runs:
        raise ConfigError("train_many needs at least one run")
    check_path(path, replicas_max, workers)
    if path.startswith("parallel") and device.type != "cpu":
        raise ConfigError(f"the {path} path runs CPU worker processes; device is {device.type}")


@dataclass
class _Job:
    indices: list[int]
    batched: bool


def _plan(keys: Sequence[object | None], batched: bool, replicas_max: int | None,
          workers: int) -> list[_Job]:
    """Jobs in run order: compatible runs (equal ``replica_group_key``, one per run) grouped
    (batched) and cut to fit replicas_max/workers."""
    if not batched:
        return [_Job([i], False) for i in range(len(keys))]
    groups: dict[object, list[int]] = {}
    singles = []
    for index, key in enumerate(keys):
        if key is None:
            singles.append(index)
        else:
            groups.setdefault(key, []).append(index)
    jobs = [_Job([i], False) for i in singles]
    for members in groups.values():
        size = replicas_max or len(members)
        if workers > 1:  # every worker gets a share
            size = min(size, -(-len(members) // workers))
        for start in range(0, len(members), size):
            chunk = members[start:start + size]
            jobs.append(_Job(chunk, len(chunk) > 1))  # a lone run is a plain train() call
    return sorted(jobs, key=lambda job: job.indices[0])


def _run_job(build: Callable[[], nn.Module], build_optimizer: OptimizerFactory, stream: Tensor | TrainStream,
             runs: Sequence[RunSpec], job: _Job, device: torch.device, progress: Progress | None,
             description: str, loggers: Sequence[StepLogger] | None = None,
             curve: ValidationProbe | None = None) -> list[tuple[int, nn.Module, TrainResult]]:
    """Train one job; ``loggers`` (one per run of the job): each run's per-step records."""
    if job.batched:
        specs = [runs[i] for i in job.indices]
        trained = train_replicas(build, stream, [s.seed for s in specs], [s.config for s in specs],
                                 device, progress, description, build_optimizer=build_optimizer, curve=curve,
                                 loggers=loggers)
        return [(i, model, result) for i, (model, result) in zip(job.indices, trained, strict=True)]
    (index,) = job.indices
    spec = runs[index]
    torch.manual_seed(spec.seed)
    model = build()
    label = spec.label or f"seed {spec.seed}"
    stop_after = spec.stop_after
    on_step = None if stop_after is None else (lambda step, loss: step + 1 < stop_after)
    result = train(model, stream, spec.config, spec.seed, device,
                   build_optimizer(spec.config.optimizer), progress,
                   description=f"{description} {label}", on_step=on_step,
                   logger=None if loggers is None else loggers[0], curve=curve)
    return [(index, model, result)]


def train_many(
    build: Callable[[], nn.Module],
    stream: Tensor | TrainStream,
    runs: Sequence[RunSpec],
    device: torch.device,
    progress: Progress | None = None,
    description: str = "train",
    logs: RunLogs | None = None,
    *,
    build_optimizer: OptimizerFactory,
    path: str = "auto",
    replicas_max: int | None = None,
    workers: int | None = None,
    curve: ValidationProbe | None = None,
) -> list[RunOutcome]:
    """Train one freshly built model per ``RunSpec`` on ``stream``; outcomes in run order.

    ``build`` constructs the architecture; it is called after the run's seed is set, so
    the initialisation is the seed's. ``build_optimizer`` gives a run's optimizer component
    from its ``config.optimizer`` (``llmevo.catalog.build_optimizer``). ``replicas_max``
    caps how many replicas one batched run holds (memory); ``workers`` caps worker
    processes (default: the CPU count).
    ``logs`` gets one run per spec (its label, else ``seed<seed>``) receiving
    that run's per-step records, on every path: as it trains (``train()`` in this process), when
    its batched job ends (the replicas' per-step tables, read once: the vmapped step never
    synchronises with the device for them) or when its worker sends it back (the worker records,
    this process writes). Each outcome holds its run's log (``RunOutcome.logger``), still open
    for the caller's final metrics; the caller closes it (on an error, every one opened is closed).
    ``curve``: every run records its validation curve (``train.trainer.ValidationProbe``), on
    every path: ``train()`` in this process or a worker, or the batched replicas.
    """
    _validate(runs, path, replicas_max, workers, device)
    chosen = default_path(device) if path == "auto" else path
    note = ""
    batched = chosen.endswith("batched")
    if batched:
        torch.manual_seed(runs[0].seed)
        refused = replica_refusals(build())
        if refused:
            batched = False
            chosen = "parallel" if chosen.startswith("parallel") else "sequential"
            note = f"cannot run batched: {', '.join(refused)}; ran {chosen}"
    count = min(workers or os.cpu_count() or 1, len(runs)) if chosen.startswith("parallel") else 1
    # a run stopped early trains alone (the replica trainer has no early stop)
    keys = [None if spec.stop_after is not None
            else replica_group_key(spec.config, build_optimizer(spec.config.optimizer)) for spec in runs]
    jobs = _plan(keys, batched, replicas_max, count)
    parallel = count > 1 and len(jobs) > 1
    opened: dict[int, RunLogger] = {}

    def open_log(index: int) -> RunLogger:
        assert logs is not None
        opened[index] = logs.run(_log_name(runs[index]))
        return opened[index]

    try:
        if parallel:
            trained = _run_parallel(build, build_optimizer, stream, runs, jobs, min(count, len(jobs)),
                                    progress, description, curve, None if logs is None else open_log)
        else:
            trained = {}
            for job in jobs:
                loggers = None if logs is None else [open_log(index) for index in job.indices]
                for index, model, result in _run_job(build, build_optimizer, stream, runs, job, device,
                                                     progress, description, loggers, curve):
                    trained[index] = (model, result, job.batched)
    except BaseException:
        for logger in opened.values():
            logger.close()
        raise
    outcomes = []
    for index, spec in enumerate(runs):
        model, result, was_batched = trained[index]
        kind = ("parallel-" if parallel else "") + ("batched" if was_batched else "")
        kind = kind.strip("-") or "sequential"
        if batched and keys[index] is None and not note:
            note = (f"a run stopped after {spec.stop_after} steps trains alone" if spec.stop_after is not None
                    else f"optimizer '{spec.config.optimizer.name}' has no batched implementation")
        outcomes.append(RunOutcome(spec, model, result, kind, note, opened.get(index)))
    return outcomes


def die_with_parent() -> None:
    """In a worker process (multiprocessing): Linux sends it SIGKILL when the process that
    started it dies, even by SIGKILL, so no worker is left behind; one whose parent died
    before this call exits now."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)


def _worker(build: Callable[[], nn.Module], build_optimizer: OptimizerFactory, stream: Tensor | TrainStream,
            runs: Sequence[RunSpec], jobs: list[_Job], tasks: multiprocessing.Queue,
            results: multiprocessing.Queue, description: str, curve: ValidationProbe | None = None,
            record: bool = False) -> None:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # its terminate() ends one at once, quietly
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_SIGNALS)  # held since the fork
    interrupts.reset()  # an interrupt the parent received as this worker forked is the parent's to act on
    torch.set_num_threads(1)
    while True:
        job_index = tasks.get()
        if job_index is None:
            return
        try:
            job = jobs[job_index]
            recordings = [_Recording() for _ in job.indices] if record else None
            trained = _run_job(build, build_optimizer, stream, runs, job, torch.device("cpu"),
                               None, description, recordings, curve=curve)
            payload = []
            for position, (index, model, result) in enumerate(trained):
                buffer = io.BytesIO()
                torch.save(model.state_dict(), buffer)
                steps = [] if recordings is None else recordings[position].records
                payload.append((index, buffer.getvalue(), result, steps))
            results.put(("ok", job_index, payload))
        except LlmevoError as error:
            results.put(("config", job_index, str(error)))
        except BaseException:  # noqa: BLE001  (reported to the parent, which raises)
            results.put(("crash", job_index, traceback.format_exc()))


def _run_parallel(build: Callable[[], nn.Module], build_optimizer: OptimizerFactory, stream: Tensor | TrainStream,
                  runs: Sequence[RunSpec], jobs: list[_Job], count: int, progress: Progress | None,
                  description: str, curve: ValidationProbe | None = None,
                  open_log: Callable[[int], StepLogger] | None = None,
                  ) -> dict[int, tuple[nn.Module, TrainResult, bool]]:
    """Run ``jobs`` on ``count`` forked single-thread CPU workers; rebuild models here
    (``open_log``: the workers record each run's steps, written here to ``open_log(index)``)."""
    context = multiprocessing.get_context("fork")
    tasks, results = context.Queue(), context.Queue()
    # larger jobs first, so the last worker to finish is not the one holding the biggest
    for job_index in sorted(range(len(jobs)), key=lambda j: -len(jobs[j].indices)):
        tasks.put(job_index)
    for _ in range(count):
        tasks.put(None)
    processes = [context.Process(target=_worker,
                                 args=(build, build_optimizer, stream, runs, jobs, tasks, results, description,
                                       curve, open_log is not None),
                                 daemon=True) for _ in range(count)]
    running: list[multiprocessing.process.BaseProcess] = []
    trained: dict[int, tuple[nn.Module, TrainResult, bool]] = {}
    if progress:
        progress.start(len(runs), f"{description} ({len(runs)} runs on {count} workers)")
    try:
        # forked with the two signals held, a worker sets its own handling before any
        # reaches it; one that arrived here meanwhile is received when they are released
        held = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_SIGNALS)
        try:
            for process in processes:
                process.start()
                running.append(process)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        started = time.perf_counter()
        for _ in jobs:
            while True:
                interrupts.stop_if_received()  # a Ctrl-C some finalizer swallowed stops here
                try:
                    kind, job_index, payload = results.get(timeout=1)
                    break
                except Exception:  # queue.Empty: check that the workers are alive
                    if not any(p.is_alive() for p in processes):
                        raise RuntimeError("every training worker exited before finishing its runs") from None
            if kind == "config":
                raise ConfigError(payload)
            if kind == "crash":
                raise RuntimeError(f"a training worker failed:\n{payload}")
            for index, state, result, steps in payload:
                if open_log is not None:
                    logger = open_log(index)
                    for step in steps:
                        logger.log_step(step)
                spec = runs[index]
                torch.manual_seed(spec.seed)
                model = build()
                model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
                trained[index] = (model, result, jobs[job_index].batched)
                if progress:
                    tokens = sum(r.tokens_seen for _, r, _ in trained.values())
                    progress.update(len(trained), result.final_loss, tokens / (time.perf_counter() - started))
    except BaseException:  # a Ctrl-C, a failed run: the workers hold nothing worth a wait
        for process in running:
            if process.is_alive():
                process.terminate()
        raise
    finally:
        if progress:
            progress.stop()
        for process in running:
            process.join(timeout=1)
            if process.is_alive():
                process.terminate()
                process.join()
    return trained
