"""Many training runs of one architecture: the seam every multi-run caller goes through.

A reproduction trains each arm under several seeds, a tuned comparison trains each arm
under several learning rates, evolution rescoring trains a genome under several seeds.
All of them describe their runs as ``RunSpec`` values (a seed and the resolved
``TrainConfig`` of that run) and call ``train_many``; how the runs are executed
(one after another, or batched as replicas) is decided here and nowhere else.

Each run starts from ``torch.manual_seed(spec.seed)`` before its model is built, and
draws its training windows from a generator seeded by ``spec.seed``, exactly as a lone
``train()`` call does, so a run's token-stream hash and losses do not depend on which
other runs it was trained with.

Public API: ``RunSpec``, ``RunOutcome``, ``train_many``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from llmevo.errors import ConfigError
from llmevo.train.logging import RunLogs
from llmevo.train.trainer import Progress, TrainConfig, TrainResult, train


@dataclass(frozen=True)
class RunSpec:
    """One training run: its seed (initialisation and windows) and its settings."""

    seed: int
    config: TrainConfig
    label: str = ""


@dataclass
class RunOutcome:
    spec: RunSpec
    model: nn.Module
    result: TrainResult
    path: str  # how it ran: "sequential" (or "batched" once the replica trainer lands)


def train_many(
    build: Callable[[], nn.Module],
    stream: Tensor,
    runs: Sequence[RunSpec],
    device: torch.device,
    progress: Progress | None = None,
    description: str = "train",
    logs: RunLogs | None = None,
) -> list[RunOutcome]:
    """Train one freshly built model per ``RunSpec`` on ``stream``; outcomes in run order.

    ``build`` constructs the architecture; it is called after the run's seed is set, so
    the initialisation is the seed's. ``logs`` gets one run per spec (named by its label,
    else ``seed<seed>``) receiving that run's per-step records, however the runs execute.
    """
    if not runs:
        raise ConfigError("train_many needs at least one run")
    outcomes = []
    for spec in runs:
        torch.manual_seed(spec.seed)
        model = build()
        label = spec.label or f"seed {spec.seed}"
        logger = logs.run(spec.label or f"seed{spec.seed}") if logs is not None else None
        try:
            result = train(model, stream, spec.config, spec.seed, device, progress,
                           description=f"{description} {label}", logger=logger)
        finally:
            if logger is not None:
                logger.close()
        outcomes.append(RunOutcome(spec, model, result, "sequential"))
    return outcomes
