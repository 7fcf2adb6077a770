"""Memory before work: estimate what an arm's training needs and refuse what cannot fit.

An arm is built as a skeleton (``llmevo.skeleton``: on the CPU while it is small, else on
PyTorch's ``meta`` device), so a model of any size is counted without allocating it. The estimate of one run is its fp32 weights, their gradients
and the optimizer's state (at most two tensors per weight: AdamW's moments), plus the
activations a training step keeps for the backward pass: per layer a fixed number of
``d_model``-wide and feed-forward-wide tensors and the attention scores, and the logits with
their softmax and gradient. Runs that train at the same time (workers of the parallel path,
replicas of the batched one) multiply it. What the machine has is ``MemAvailable`` of
``/proc/meminfo`` (or the physical memory where that file is missing) on a CPU, and the free
memory of the device on CUDA.

The estimate is deliberately coarse (it is there to refuse a billion-wide hidden layer or a
million-row batch before they crash the machine, not to plan memory to the megabyte); it
refuses only what exceeds what is available.

Public API: ``MemoryEstimate``, ``estimate_memory``, ``available_memory``, ``concurrent_runs``,
``check_memory``, ``CpuClock``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.skeleton import parameter_count
from llmevo.train.execution import Execution, default_path
from llmevo.train.trainer import TrainConfig

BYTES_PER_VALUE = 4  # fp32 weights, gradients, state and activations
OPTIMIZER_STATE_PER_WEIGHT = 2  # AdamW's two moments; Muon and Lion keep fewer
WIDE_TENSORS_PER_LAYER = 16  # d_model-wide activations a pre-norm block keeps (norms, q/k/v, residuals)
HIDDEN_TENSORS_PER_LAYER = 3  # feed-forward-wide ones (up, gate, activation)
ATTENTION_TENSORS_PER_LAYER = 2  # scores and their softmax, per head
LOGIT_TENSORS = 3  # logits, their softmax and its gradient


@dataclass(frozen=True)
class MemoryEstimate:
    parameters: int
    weights_bytes: int  # weights, gradients and optimizer state
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.activation_bytes


def _hidden(config: ModelConfig) -> int:
    hidden = config.feedforward.config.get("hidden")
    return int(hidden) if isinstance(hidden, int | float) else 4 * config.d_model


def estimate_memory(config: ModelConfig, train: TrainConfig) -> MemoryEstimate:
    """What one training run of ``config`` at ``train``'s batch and window needs."""
    parameters = parameter_count(config)
    weights = parameters * (2 + OPTIMIZER_STATE_PER_WEIGHT) * BYTES_PER_VALUE
    positions = train.batch_size * train.seq_len
    per_layer = (WIDE_TENSORS_PER_LAYER * config.d_model + HIDDEN_TENSORS_PER_LAYER * _hidden(config)
                 + ATTENTION_TENSORS_PER_LAYER * config.n_heads * train.seq_len)
    activations = positions * (config.n_layers * per_layer + LOGIT_TENSORS * config.vocab_size)
    return MemoryEstimate(parameters, weights, activations * BYTES_PER_VALUE)


def available_memory(device: torch.device, meminfo: Path = Path("/proc/meminfo")) -> int:
    """Bytes a run may use on ``device``: free device memory on CUDA; else available RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def concurrent_runs(execution: Execution, device: torch.device, runs: int) -> int:
    """How many of ``runs`` runs of one arm train at the same time on ``execution``'s path."""
    path = default_path(device) if execution.path == "auto" else execution.path
    if path == "sequential":
        return 1
    if path == "batched":
        return min(runs, execution.replicas_max or runs)
    return min(runs, os.cpu_count() or 1)  # parallel workers (each may hold replicas)


def _gib(value: int) -> str:
    return f"{value / 2**30:,.1f} GiB"


def check_memory(
    what: str, config: ModelConfig, train: TrainConfig, device: torch.device, concurrent: int = 1,
    available: int | None = None,
) -> MemoryEstimate:
    """Refuse, before any training, an arm whose ``concurrent`` runs at once need more memory
    than ``device`` has (one line naming the estimate and what is available)."""
    estimate = estimate_memory(config, train)
    have = available_memory(device) if available is None else available
    need = estimate.total_bytes * concurrent
    if need > have:
        runs = f" x {concurrent} runs at once" if concurrent > 1 else ""
        raise ConfigError(
            f"{what}: training needs about {_gib(need)} ({estimate.parameters:,} parameters: "
            f"{_gib(estimate.weights_bytes)} for weights, gradients and optimizer state, "
            f"{_gib(estimate.activation_bytes)} of activations at batch {train.batch_size} x "
            f"{train.seq_len}{runs}), but {device.type} has {_gib(have)} available; "
            "use a smaller model or batch")
    return estimate


class CpuClock:
    """CPU seconds (user + system) of this process and its finished children, and wall seconds,
    since it was made (``resource.getrusage``; a worker pool's share counts once it has exited)."""

    def __init__(self) -> None:
        self._start = self._cpu(), time.perf_counter()

    @staticmethod
    def _cpu() -> float:
        import resource

        return sum(usage.ru_utime + usage.ru_stime for usage in
                   (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))

    def read(self) -> tuple[float, float]:
        return self._cpu() - self._start[0], time.perf_counter() - self._start[1]
