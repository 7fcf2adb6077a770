"""One arm trained and evaluated under one seed: what the runner (``runner.run``) produces
and the arm cache (``runner.cache``) stores and gives back.

Public API: ``ArmRun``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from llmevo.components.post_training.stage import StageResult
from llmevo.train.trainer import TrainResult


@dataclass
class ArmRun:
    """One arm trained and evaluated under one seed. A run whose training did not complete
    (``status`` diverged, or stopped by a hurdle) has no metrics."""

    seed: int
    validation: dict[str, float]  # with the run's initial_loss and final_loss
    test: dict[str, float]  # empty when the test split was not asked for
    train: TrainResult
    parameters: int
    architecture_stats: dict[str, Any]
    model: nn.Module
    train_config: dict[str, Any]  # the resolved training settings of this run
    path: str = "sequential"  # how it was trained (llmevo.train.execution paths)
    cached: bool = False  # loaded from the arm cache (runner.cache), not trained now
    stage: StageResult | None = None  # the post-training stage, when the arm has one

    @property
    def status(self) -> str:
        """complete, diverged or stopped (``TrainResult.status``)."""
        return self.train.status

    @property
    def lr(self) -> float:
        return float(self.train_config["lr"])
