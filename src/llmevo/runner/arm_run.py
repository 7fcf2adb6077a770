"""One arm trained and evaluated under one seed: what the runner produces and the arm cache
(``runner.cache``) stores and gives back.

Public API: ``ArmRun``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from llmevo.train.trainer import TrainResult


@dataclass
class ArmRun:
    """One arm trained and evaluated under one seed."""

    validation: dict[str, float]
    test: dict[str, float]
    train: TrainResult
    parameters: int
    architecture_stats: dict[str, Any]
    model: nn.Module
    train_config: dict[str, Any]  # the resolved training settings of this run
    path: str = "sequential"  # how it was trained (llmevo.train.many paths)
    cached: bool = False  # loaded from the arm cache (runner.cache), not trained now
